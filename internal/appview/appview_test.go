package appview

import "testing"

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, → unicode":   "plain text, → unicode",
		"two\nlines\tand a tab":   "two\nlines\tand a tab",
		"\x1b]52;c;ZXZpbA==\x07!": `\x1b]52;c;ZXZpbA==\a!`,
		"right\u202eto left":      `right\u202eto left`,
		"bad \xff byte":           `bad \ufffd byte`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
