package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	goyaml "github.com/goccy/go-yaml"
	yamlparser "github.com/goccy/go-yaml/parser"
	"github.com/pelletier/go-toml/v2"
)

// syntaxError says where the file at path, which viper could not parse,
// goes wrong: the line and column and the lines around them. viper's YAML
// parser names the line where the enclosing block starts, not where the
// error is, and its TOML and JSON errors name no line at all; this parses
// the file again with a parser that knows. It returns nil when that parser
// finds nothing, for the caller to fall back on viper's error.
func syntaxError(path, format string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	switch format {
	case "yaml", "yml":
		_, err := yamlparser.ParseBytes(data, 0)
		var ye goyaml.Error
		if errors.As(err, &ye) && ye.GetToken() != nil {
			pos := ye.GetToken().Position
			// The source excerpt, without its "[line:col] message" head.
			_, excerpt, _ := strings.Cut(ye.FormatError(false, true), "\n")
			return fmt.Errorf("line %d, column %d: %s\n%s", pos.Line, pos.Column, ye.GetMessage(), strings.TrimRight(excerpt, "\n"))
		}
	case "toml":
		var v map[string]any
		err := toml.Unmarshal(data, &v)
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return fmt.Errorf("line %d, column %d: %s\n%s", row, col, strings.TrimPrefix(de.Error(), "toml: "), de.String())
		}
	case "json":
		var v any
		err := json.Unmarshal(data, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := lineCol(data, se.Offset)
			return fmt.Errorf("line %d, column %d: %v", line, col, se)
		}
	}
	return nil
}

// lineCol returns the 1-based line and column of the byte at offset.
func lineCol(data []byte, offset int64) (int, int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line := 1 + strings.Count(string(before), "\n")
	col := int(offset) - strings.LastIndexByte(string(before), '\n')
	return line, max(col, 1)
}
