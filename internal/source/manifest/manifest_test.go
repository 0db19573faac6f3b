package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(objs []Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName()+"@"+o.Source.String())
	}
	return out
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []string
	}{{
		name: "multi-document file with empty documents and comments",
		data: `---
# a comment only
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: one
data:
  k: v
---

---
apiVersion: v1
kind: Service
metadata: {name: two, namespace: web}
...
`,
		want: []string{"ConfigMap/one@f.yaml:4", "Service/two@f.yaml:13"},
	}, {
		name: "List kinds are flattened",
		data: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: b}
`,
		want: []string{"ConfigMap/a@f.yaml:1", "ConfigMap/b@f.yaml:1"},
	}, {
		name: "JSON",
		data: `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "json"}}`,
		want: []string{"Namespace/json@f.yaml:1"},
	}, {
		name: "an empty file",
		data: "",
		want: nil,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Parse("f.yaml", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseKeepsKubernetesValueTypes(t *testing.T) {
	objs, err := Parse("f.yaml", []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  template:
    spec:
      containers:
      - name: web
        resources: {limits: {cpu: 0.5, memory: 512Mi}}
        env:
        - {name: ENABLED, value: "yes"}
        - {name: WHEN, value: 2024-01-01}
        - {name: PLAIN_YES, value: yes}
`))
	if err != nil {
		t.Fatal(err)
	}
	o := objs[0]
	// DeepCopy panics on value types JSON does not have; it must not.
	copied := o.DeepCopy()
	replicas, _, _ := unstructuredInt(copied.Object, "spec", "replicas")
	if replicas != 3 {
		t.Errorf("replicas = %v", replicas)
	}
	containers := copied.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
	env := containers[0].(map[string]any)["env"].([]any)
	for i, want := range []string{"yes", "2024-01-01", "yes"} {
		if got := env[i].(map[string]any)["value"]; got != want {
			t.Errorf("env[%d] = %#v, want the string %q (YAML 1.2: yes and dates stay strings)", i, got, want)
		}
	}
}

func unstructuredInt(obj map[string]any, fields ...string) (int64, bool, error) {
	var cur any = obj
	for _, f := range fields {
		cur = cur.(map[string]any)[f]
	}
	v, ok := cur.(int64)
	return v, ok, nil
}

func TestParseErrorsNameTheFileAndLine(t *testing.T) {
	tests := []struct {
		name string
		data string
		want string
	}{{
		name: "invalid YAML",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n data: oops\n",
		// The YAML library reports the line of the enclosing context.
		want: "bad.yaml:4: invalid YAML: did not find expected key",
	}, {
		name: "invalid YAML in a later document",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: [unclosed\n",
		want: "bad.yaml:5: invalid YAML: did not find expected ',' or ']'",
	}, {
		name: "missing apiVersion",
		data: "---\nkind: ConfigMap\nmetadata: {name: a}\n",
		want: "bad.yaml:2: missing apiVersion",
	}, {
		name: "missing kind",
		data: "apiVersion: v1\nmetadata: {name: a}\n",
		want: "bad.yaml:1: missing kind",
	}, {
		name: "missing metadata.name",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: a}\n",
		want: "bad.yaml:1: ConfigMap has no metadata.name",
	}, {
		name: "generateName",
		data: "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: run-}\n",
		want: "bad.yaml:1: Job uses metadata.generateName, which GitOps cannot track: set metadata.name",
	}, {
		name: "a document that is a list",
		data: "- a\n- b\n",
		want: "bad.yaml:1: a document must be a mapping (an object), not a list",
	}, {
		name: "duplicate keys",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  k: one\n  k: two\n",
		want: `mapping key "k" already defined at line 5`,
	}, {
		name: "List item without a name",
		data: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {}\n",
		want: "bad.yaml:1: List item 0: ConfigMap has no metadata.name",
	}, {
		name: "a label value that is not a string",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {tier: web}\n  annotations: {prometheus.io/port: 8080}\n",
		want: "bad.yaml:1: ConfigMap a: metadata.annotations[prometheus.io/port] must be a string (quote it)",
	}, {
		name: "non-string key",
		data: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  1: one\n",
		want: "bad.yaml:1: field data has a key that is not a string",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tt.data))
			var manifestErr *Error
			if !errors.As(err, &manifestErr) {
				t.Fatalf("got %v, want a manifest Error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestErrorsNeverShowASecretsValues(t *testing.T) {
	const marker = "hunter2-SECRET-VALUE"
	for _, data := range []string{
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: " + marker + "\n   bad: indent\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: " + marker + "\n  password: " + marker + "\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {namespace: " + marker + "}\nstringData: {password: " + marker + "}\n",
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {password: !!binary " + marker + "}\n",
	} {
		_, err := Parse("secret.yaml", []byte(data))
		if err == nil {
			t.Errorf("no error for %q", data)
			continue
		}
		if strings.Contains(err.Error(), marker) {
			t.Errorf("error %q shows a secret value", err)
		}
	}
}

func TestDuplicatesNameBothSources(t *testing.T) {
	a, err := Parse("a.yaml", []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse("b/c.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: prod}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: prod}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = Duplicates(append(a, b...))
	want := "duplicate objects: Deployment.apps prod/web is defined twice: in a.yaml:1 and in b/c.yaml:5"
	if err == nil || err.Error() != want {
		t.Errorf("Duplicates = %v, want %q", err, want)
	}
	if err := Duplicates(b); err != nil {
		t.Errorf("same name, different kinds: %v", err)
	}
}

// FuzzParse feeds the parser arbitrary bytes: it must not panic, every object
// it returns must be valid and deep-copyable, and every error must name the
// file.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {k: v}\n",
		"---\n---\napiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: Secret, metadata: {name: s}}]\n",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n"}}`,
		"a: &a [*a]\n",
		"a: &a {b: *a}\napiVersion: v1\n",
		"apiVersion: v1\nkind: X\nmetadata: {name: 1}\n",
		"{",
		"- - - -",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {1: 2, 3.5: x}\n",
		"!!binary aGVsbG8=",
		"x: 1e999\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Parse("fuzz.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("invalid object returned: %v", o.Object)
			}
			_ = o.DeepCopy()
			if _, err := o.MarshalJSON(); err != nil {
				t.Fatalf("object does not marshal: %v", err)
			}
		}
	})
}

// A hook may be named by a generateName, since each sync creates it anew;
// an ordinary object, or one that is never applied (Skip), may not.
func TestOnlyAHookMayUseGenerateName(t *testing.T) {
	for annotations, ok := range map[string]bool{
		`{argocd.argoproj.io/hook: PreSync}`:  true,
		`{plumb.dev/hook: PostSync}`:          true,
		`{helm.sh/hook: pre-install}`:         true,
		`{argocd.argoproj.io/hook: Skip}`:     false,
		`{helm.sh/hook: crd-install}`:         false,
		`{argocd.argoproj.io/sync-wave: "1"}`: false,
	} {
		data := "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: migrate-\n  annotations: " + annotations + "\n"
		_, err := Parse("job.yaml", []byte(data))
		if (err == nil) != ok {
			t.Errorf("a Job named by generateName with annotations %s: %v, want accepted %v", annotations, err, ok)
		}
	}
}
