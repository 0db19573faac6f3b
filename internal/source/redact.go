package source

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plumb-dev/plumb/internal/source/render"
	"github.com/plumb-dev/plumb/internal/source/tree"
)

// minRedactedLength keeps very short values (e.g. "1") from redacting
// unrelated text; they reveal little anyway.
const minRedactedLength = 4

// redactSecrets replaces, in a Kustomize or Helm error, every value that the
// repository's Secret manifests and Kustomize secretGenerators hold. It is
// defence in depth: plumb's own messages never print values, but a
// renderer's message may quote its input.
func redactSecrets(err error, t *tree.Tree) error {
	var renderErr *render.Error
	if !errors.As(err, &renderErr) {
		return err
	}
	values := secretValues(t)
	msg := err.Error()
	redacted := msg
	for _, v := range values {
		redacted = strings.ReplaceAll(redacted, v, "***")
	}
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

// secretValues collects Secret data and stringData values (and their base64
// decodings) and secretGenerator literals from every manifest in the tree,
// longest first.
func secretValues(t *tree.Tree) []string {
	files, err := t.Files("")
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	add := func(v string) {
		if len(v) >= minRedactedLength {
			seen[v] = true
		}
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
				if errors.Is(err, io.EOF) {
					break
				}
				break // unparseable: nothing more to learn from this file
			}
			if doc["kind"] == "Secret" {
				for _, field := range []string{"data", "stringData"} {
					m, _ := doc[field].(map[string]any)
					for _, v := range m {
						s, ok := v.(string)
						if !ok {
							continue
						}
						add(s)
						if decoded, err := base64.StdEncoding.DecodeString(s); err == nil && field == "data" {
							add(string(decoded))
						}
					}
				}
			}
			generators, _ := doc["secretGenerator"].([]any)
			for _, g := range generators {
				m, _ := g.(map[string]any)
				literals, _ := m["literals"].([]any)
				for _, l := range literals {
					if s, ok := l.(string); ok {
						add(s)
						if _, v, ok := strings.Cut(s, "="); ok {
							add(v)
						}
					}
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}
