package testenv

import (
	"embed"
	"testing"
)

// fixtures are the manifests that tests of many packages deploy.
//
//go:embed testdata/*.yaml
var fixtures embed.FS

// Fixture returns the manifest testdata/name of this package: the objects
// that tests of many packages deploy, kept in one place rather than copied
// inline. A missing fixture fails the test.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	data, err := fixtures.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return string(data)
}
