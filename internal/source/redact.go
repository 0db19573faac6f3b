package source

import (
	"bytes"
	"errors"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plumb-dev/plumb/internal/redact"
	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// redactSecrets replaces, in a Kustomize or Helm error, every value that the
// repository's Secret manifests and Kustomize secretGenerators hold: a
// renderer's message may quote its input.
func redactSecrets(err error, t *tree.Tree) error {
	var renderErr *render.Error
	if !errors.As(err, &renderErr) {
		return err
	}
	values := secretValues(t)
	msg := err.Error()
	redacted := values.In(msg)
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, cause: err}
}

// redactedError keeps the cause for errors.Is/As but prints the redacted text.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

// secretValues collects the values of every Secret manifest and the
// secretGenerator literals in the tree.
func secretValues(t *tree.Tree) *redact.Values {
	values := &redact.Values{}
	files, err := t.Files("")
	if err != nil {
		return values
	}
	for _, file := range files {
		switch strings.ToLower(path.Ext(file)) {
		case ".yaml", ".yml", ".json", "":
		default:
			continue
		}
		data, err := t.ReadFile(file)
		if err != nil {
			continue
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); err != nil {
				break // the end, or unparseable: nothing more to learn from this file
			}
			values.AddSecret(doc)
			generators, _ := doc["secretGenerator"].([]any)
			for _, g := range generators {
				m, _ := g.(map[string]any)
				literals, _ := m["literals"].([]any)
				for _, l := range literals {
					if s, ok := l.(string); ok {
						values.Add(s)
						if _, v, ok := strings.Cut(s, "="); ok {
							values.Add(v)
						}
					}
				}
			}
		}
	}
	return values
}
