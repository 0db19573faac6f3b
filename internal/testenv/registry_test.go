package testenv

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// The registry is real: it refuses requests without its account's
// credentials, and stores and serves a blob pushed with them.
func TestARegistryAuthenticatesAndStores(t *testing.T) {
	r := StartRegistry(t)
	do := func(method, target string, body []byte, user, password string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, target, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	api := "http://" + r.Host + "/v2/"
	for _, c := range []struct {
		user, password string
		want           int
	}{{"", "", http.StatusUnauthorized}, {r.Username, "wrong", http.StatusUnauthorized}, {r.Username, r.Password, http.StatusOK}} {
		if got := do(http.MethodGet, api, nil, c.user, c.password).StatusCode; got != c.want {
			t.Errorf("GET /v2/ as %q/%q: %d, want %d", c.user, c.password, got, c.want)
		}
	}

	blob := []byte("a layer of plumb's tests")
	digest := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	start := do(http.MethodPost, api+"plumb/test/blobs/uploads/", nil, r.Username, r.Password)
	if start.StatusCode != http.StatusAccepted {
		t.Fatalf("starting an upload: %d, want 202", start.StatusCode)
	}
	location, err := url.Parse(start.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	upload := (&url.URL{Scheme: "http", Host: r.Host}).ResolveReference(location)
	q := upload.Query()
	q.Set("digest", digest)
	upload.RawQuery = q.Encode()
	if got := do(http.MethodPut, upload.String(), blob, r.Username, r.Password).StatusCode; got != http.StatusCreated {
		t.Fatalf("finishing the upload: %d, want 201", got)
	}
	if got := do(http.MethodHead, api+"plumb/test/blobs/"+digest, nil, r.Username, r.Password).StatusCode; got != http.StatusOK {
		t.Errorf("HEAD of the pushed blob: %d, want 200", got)
	}
	if got := do(http.MethodHead, api+"plumb/test/blobs/"+digest, nil, "", "").StatusCode; got != http.StatusUnauthorized {
		t.Errorf("HEAD of the pushed blob without credentials: %d, want 401", got)
	}
}
