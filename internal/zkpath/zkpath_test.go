package zkpath

import (
	"testing"

	"go.uber.org/goleak"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/a", true},
		{"/myapp/locks", true},
		{"/é/ü", true},
		{"a", false},
		{"", false},
		{"/", false},
		{"/a/", false},
		{"/a//b", false},
		{"/a/./b", false},
		{"/a/../b", false},
		{"/zookeeper", false},
		{"/zookeeper/quota", false},
		{"/zookeeperish", true},
		{"/a\x00b", false},
		{"/a\x01", false},
		{"/\xff", false},
		{"/a\uffff", false},
	} {
		if err := Check(tc.path); (err == nil) != tc.ok {
			t.Errorf("Check(%q) = %v; want ok %v", tc.path, err, tc.ok)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
