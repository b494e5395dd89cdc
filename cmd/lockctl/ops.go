package main

import (
	"errors"
	"io"
)

// The operations commands arrive with the engines' inspection support.
var errNotYet = errors.New("not implemented yet")

func runStatus(args []string, stdout, stderr io.Writer) error  { return errNotYet }
func runHolders(args []string, stdout, stderr io.Writer) error { return errNotYet }
func runUnlock(args []string, stdout, stderr io.Writer) error  { return errNotYet }
func runSwitch(args []string, stdout, stderr io.Writer) error  { return errNotYet }
