package oci_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/plumb-dev/plumb/internal/source/oci"
)

func TestADockerConfigGivesTheRegistrysAccount(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et"))
	config := `{"auths":{
		"https://index.docker.io/v1/":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("hub:hubpass")) + `"},
		"registry.example.com:5000":{"auth":"` + auth + `"},
		"https://ghcr.io":{"username":"bob","password":"token"},
		"tokens.example.com":{"identitytoken":"x"}},
		"credsStore":"evil","credHelpers":{"registry.example.com:5000":"evil"}}`
	for _, tc := range []struct {
		url  string
		want oci.Auth
	}{
		{"oci://registry.example.com:5000/org/app", oci.Auth{Username: "alice", Password: "s3cr:et"}},
		{"oci://ghcr.io/org/app", oci.Auth{Username: "bob", Password: "token"}},
		{"oci://docker.io/library/app", oci.Auth{Username: "hub", Password: "hubpass"}},
		{"oci://other.example.com/app", oci.Auth{}},
		{"oci://registry.example.com/org/app", oci.Auth{}}, // another port is another registry
	} {
		got, err := oci.AuthFromDockerConfig([]byte(config), tc.url)
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.url, got, err, tc.want)
		}
	}
	if _, err := oci.AuthFromDockerConfig([]byte(config), "oci://tokens.example.com/app"); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("an identity token: %v, want a refusal that says only a username and password are read", err)
	}
	if _, err := oci.AuthFromDockerConfig([]byte(`{"auths":{"r.example.com":{"auth":"c2VjcmV0LXdpdGhvdXQtY29sb24="}}}`), "oci://r.example.com/a"); err == nil ||
		strings.Contains(err.Error(), "c2VjcmV0") || strings.Contains(err.Error(), "secret-without-colon") {
		t.Errorf("a malformed auth: %v, want an error that quotes nothing of it", err)
	}
}

// Two keys for one registry: every read takes the same account.
func TestTwoKeysForOneRegistryGiveOneAccount(t *testing.T) {
	config := `{"auths":{"https://ghcr.io/v1/":{"username":"second","password":"b"},"ghcr.io":{"username":"first","password":"a"},
		"http://ghcr.io":{"username":"third","password":"c"}}}`
	for range 50 { // map order is random: one read in 50 would show it
		got, err := oci.AuthFromDockerConfig([]byte(config), "oci://ghcr.io/org/app")
		if err != nil || got.Username != "first" {
			t.Fatalf("%+v, %v; want the account of the key ghcr.io, first in order", got, err)
		}
	}
}
