package redact

import (
	"strings"
	"testing"
)

func TestEveryFormOfASecretValueIsHidden(t *testing.T) {
	var values Values
	values.AddSecret(map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"data":       map[string]any{"token": "c2VjcmV0LXZhbHVl"},           // "secret-value"
		"stringData": map[string]any{"password": `pa"ss\word`, "pin": "12"}, // too short to hide
	})
	message := `denied: token c2VjcmV0LXZhbHVl (secret-value), password pa"ss\word quoted "pa\"ss\\word" encoded cGEic3Ncd29yZA==, pin 12`
	got := values.In(message)
	for _, leaked := range []string{"c2VjcmV0LXZhbHVl", "secret-value", `pa"ss\word`, `pa\"ss\\word`, "cGEic3Ncd29yZA=="} {
		if strings.Contains(got, leaked) {
			t.Errorf("%q is still in %q", leaked, got)
		}
	}
	if !strings.Contains(got, "pin 12") {
		t.Errorf("a value shorter than %d characters was hidden: %q", minLength, got)
	}
}

func TestOnlySecretsAreRead(t *testing.T) {
	var values Values
	values.AddSecret(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": "visible-value"}})
	values.AddSecret(nil)
	if !values.Empty() {
		t.Fatalf("values were taken from objects that are not Secrets: %v", values.set)
	}
	if got := values.In("visible-value"); got != "visible-value" {
		t.Errorf("In changed a message with nothing to hide: %q", got)
	}
	// A malformed Secret (the kind of input that fails a render) counts.
	values.AddSecret(map[string]any{"apiVersion": "V1", "kind": "Secret", "stringData": map[string]any{"k": "hidden-value"}})
	if got := values.In("render failed at hidden-value"); got != "render failed at "+Mask {
		t.Errorf("a Secret with apiVersion V1 was not read: %q", got)
	}
}

func TestALongerValueIsHiddenWhole(t *testing.T) {
	var values Values
	values.Add("abcd")
	values.Add("abcdefgh")
	if got := values.In("x abcdefgh y"); got != "x "+Mask+" y" {
		t.Errorf("got %q, want the longer value replaced whole", got)
	}
}
