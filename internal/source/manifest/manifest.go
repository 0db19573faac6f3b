// Package manifest turns YAML and JSON files into Kubernetes objects, each
// remembering the file and line it came from. It treats its input as hostile:
// every error names the file and line, never echoes a value, and the parser
// survives any input (it is fuzzed).
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/plumb-dev/plumb/internal/syncorder"
)

// Source is where an object was written.
type Source struct {
	// File is the path relative to the repository root, or a renderer's name
	// for generated output (e.g. "helm:chart/templates/svc.yaml").
	File string
	// Line is the first line of the object's document (1-based; 0 unknown).
	Line int
}

func (s Source) String() string {
	if s.Line == 0 {
		return s.File
	}
	return fmt.Sprintf("%s:%d", s.File, s.Line)
}

// Object is one Kubernetes object and where it came from.
type Object struct {
	*unstructured.Unstructured
	Source Source
}

// ID identifies an object: its group, kind, namespace and name.
type ID struct {
	Group, Kind, Namespace, Name string
}

func (id ID) String() string {
	gk := id.Kind
	if id.Group != "" {
		gk = id.Kind + "." + id.Group
	}
	if id.Namespace == "" {
		return gk + " " + id.Name
	}
	return gk + " " + id.Namespace + "/" + id.Name
}

// IDOf returns an object's ID.
func IDOf(u *unstructured.Unstructured) ID {
	gvk := u.GroupVersionKind()
	return ID{Group: gvk.Group, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// Error is an invalid manifest: the file, the line and what is wrong. It
// never contains a value from the file.
type Error struct {
	Source Source
	Reason string
}

func (e *Error) Error() string { return e.Source.String() + ": " + e.Reason }

// Parse reads every document of a YAML or JSON file: multi-document files
// are split, empty documents skipped and List kinds flattened. Each object
// must have apiVersion, kind and metadata.name.
func Parse(file string, data []byte) ([]Object, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var objects []Object
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, &Error{Source: Source{File: file, Line: yamlErrorLine(err)}, Reason: "invalid YAML: " + yamlErrorReason(err)}
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document
		}
		root := doc.Content[0]
		src := Source{File: file, Line: root.Line}
		if root.Kind != yaml.MappingNode {
			return nil, &Error{Source: src, Reason: "a document must be a mapping (an object), not " + kindName(root)}
		}
		keepTimestampsAsStrings(root)
		var raw any
		if err := root.Decode(&raw); err != nil {
			return nil, &Error{Source: src, Reason: "invalid YAML: " + yamlErrorReason(err)}
		}
		value, err := toJSONValue(raw, "")
		if err != nil {
			return nil, &Error{Source: src, Reason: err.Error()}
		}
		objs, err := objectsOf(value.(map[string]any), src)
		if err != nil {
			return nil, err
		}
		objects = append(objects, objs...)
	}
}

// keepTimestampsAsStrings retags unquoted dates and times as strings: the
// YAML decoder would turn them into time.Time, which Kubernetes objects do
// not hold (kubectl, too, keeps them as the text written).
func keepTimestampsAsStrings(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!timestamp" {
		n.Tag = "!!str"
	}
	for _, child := range n.Content {
		keepTimestampsAsStrings(child)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

// objectsOf validates one document and flattens a List.
func objectsOf(obj map[string]any, src Source) ([]Object, error) {
	u := &unstructured.Unstructured{Object: obj}
	kind, _ := obj["kind"].(string)
	if items, isList := obj["items"].([]any); isList && strings.HasSuffix(kind, "List") {
		var out []Object
		for i, item := range items {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, &Error{Source: src, Reason: fmt.Sprintf("%s item %d is not an object", kind, i)}
			}
			objs, err := objectsOf(m, src)
			if err != nil {
				var e *Error
				if errors.As(err, &e) {
					e.Reason = fmt.Sprintf("%s item %d: %s", kind, i, e.Reason)
				}
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	if err := validate(u); err != nil {
		return nil, &Error{Source: src, Reason: err.Error()}
	}
	return []Object{{Unstructured: u, Source: src}}, nil
}

// validate checks the fields every object needs. Messages name fields and
// kinds, never values of a Secret.
func validate(u *unstructured.Unstructured) error {
	obj := u.Object
	apiVersion, ok := obj["apiVersion"].(string)
	if !ok || apiVersion == "" {
		return errors.New("missing apiVersion")
	}
	if _, err := schema.ParseGroupVersion(apiVersion); err != nil {
		return fmt.Errorf("malformed apiVersion %q", apiVersion)
	}
	kind, ok := obj["kind"].(string)
	if !ok || kind == "" {
		return errors.New("missing kind")
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("%s has no metadata", kind)
	}
	if name, ok := meta["name"].(string); !ok || name == "" {
		generate, hasGenerate := meta["generateName"].(string)
		switch {
		case hasGenerate && generate != "" && syncorder.IsHook(u.GetAnnotations()):
			// A hook is created anew each sync, not tracked: it may.
		case hasGenerate:
			return fmt.Errorf("%s uses metadata.generateName, which GitOps cannot track: set metadata.name (only a hook, argocd.argoproj.io/hook, may use generateName)", kind)
		default:
			return fmt.Errorf("%s has no metadata.name", kind)
		}
	}
	if ns, present := meta["namespace"]; present {
		if _, ok := ns.(string); !ok {
			return fmt.Errorf("%s %s: metadata.namespace must be a string", kind, meta["name"])
		}
	}
	// The API server takes only strings here; an unquoted number or boolean
	// (`prometheus.io/port: 8080`) is a common slip, named here rather than
	// left to fail the apply.
	for _, field := range []string{"labels", "annotations"} {
		values, present := meta[field]
		if !present || values == nil {
			continue
		}
		m, ok := values.(map[string]any)
		if !ok {
			return fmt.Errorf("%s %s: metadata.%s must be a mapping", kind, meta["name"], field)
		}
		for key, value := range m {
			if _, ok := value.(string); !ok && value != nil {
				return fmt.Errorf("%s %s: metadata.%s[%s] must be a string (quote it)", kind, meta["name"], field, key)
			}
		}
	}
	return nil
}

// maxDepth bounds nesting, so a hostile document cannot exhaust the stack.
const maxDepth = 100

// toJSONValue converts what the YAML decoder produced into the value types of
// unstructured objects (JSON's): map[string]any, []any, string, int64,
// float64, bool and nil.
func toJSONValue(v any, path string) (any, error) {
	if strings.Count(path, ".") > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, item := range t {
			converted, err := toJSONValue(item, path+"."+k)
			if err != nil {
				return nil, err
			}
			out[k] = converted
		}
		return out, nil
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, item := range t {
			key, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("field %s has a key that is not a string", displayPath(path))
			}
			converted, err := toJSONValue(item, path+"."+key)
			if err != nil {
				return nil, err
			}
			out[key] = converted
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, item := range t {
			converted, err := toJSONValue(item, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = converted
		}
		return out, nil
	case int:
		return int64(t), nil
	case int64:
		return t, nil
	case uint64:
		if t > math.MaxInt64 {
			return nil, fmt.Errorf("field %s holds an integer too large for Kubernetes", displayPath(path))
		}
		return int64(t), nil
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, fmt.Errorf("field %s holds a number JSON cannot represent", displayPath(path))
		}
		return t, nil
	case string, bool, nil:
		return t, nil
	default:
		return nil, fmt.Errorf("field %s holds a value of YAML type %T that Kubernetes does not accept", displayPath(path), v)
	}
}

func displayPath(path string) string {
	if path == "" {
		return "(root)"
	}
	return strings.TrimPrefix(path, ".")
}

// Duplicates finds objects with the same group, kind, namespace and name
// and names both sources of each.
func Duplicates(objects []Object) error {
	seen := make(map[ID]Source, len(objects))
	var msgs []string
	for _, o := range objects {
		if o.GetName() == "" {
			continue // a hook named by generateName: each is created anew
		}
		id := IDOf(o.Unstructured)
		if first, dup := seen[id]; dup {
			msgs = append(msgs, fmt.Sprintf("%s is defined twice: in %s and in %s", id, first, o.Source))
			continue
		}
		seen[id] = o.Source
	}
	if len(msgs) == 0 {
		return nil
	}
	sort.Strings(msgs)
	return &DuplicateError{Messages: msgs}
}

// DuplicateError lists every object defined more than once.
type DuplicateError struct {
	Messages []string
}

func (e *DuplicateError) Error() string {
	return "duplicate objects: " + strings.Join(e.Messages, "; ")
}

// yamlErrorLine extracts the line from a YAML decoder error ("yaml: line 7:
// ..."), or 0 when it names none.
func yamlErrorLine(err error) int {
	var typeErr *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &typeErr) && len(typeErr.Errors) > 0 {
		msg = strings.TrimSpace(typeErr.Errors[0])
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	var line int
	if _, scanErr := fmt.Sscanf(msg, "line %d:", &line); scanErr != nil {
		return 0
	}
	return line
}

// yamlErrorReason is the decoder's message without its "yaml: line N:"
// prefix (the line is reported separately).
func yamlErrorReason(err error) string {
	var typeErr *yaml.TypeError
	if errors.As(err, &typeErr) {
		reasons := make([]string, 0, len(typeErr.Errors))
		for _, e := range typeErr.Errors {
			reasons = append(reasons, strings.TrimSpace(e))
		}
		return strings.Join(reasons, "; ")
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if strings.HasPrefix(msg, "line ") {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			return rest
		}
	}
	return msg
}
