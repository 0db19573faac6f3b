package source

import "github.com/plumb-dev/plumb/internal/source/git"

// Keys of the App's credentials Secret (the same keys Flux's GitRepository
// uses, so existing Secrets work unchanged).
const (
	SecretKeyUsername    = "username"
	SecretKeyPassword    = "password" // also the passphrase of an encrypted identity
	SecretKeyBearerToken = "bearerToken"
	SecretKeyIdentity    = "identity" // an SSH private key
	SecretKeyKnownHosts  = "known_hosts"
	SecretKeyCAFile      = "caFile"
	SecretKeyCACert      = "ca.crt" // accepted as caFile
)

// AuthFromSecret turns the data of a credentials Secret into git.Auth.
func AuthFromSecret(data map[string][]byte) git.Auth {
	auth := git.Auth{
		Username:    string(data[SecretKeyUsername]),
		Password:    string(data[SecretKeyPassword]),
		BearerToken: string(data[SecretKeyBearerToken]),
		KnownHosts:  data[SecretKeyKnownHosts],
		CABundle:    data[SecretKeyCAFile],
	}
	if len(auth.CABundle) == 0 {
		auth.CABundle = data[SecretKeyCACert]
	}
	if identity := data[SecretKeyIdentity]; len(identity) > 0 {
		auth.SSHPrivateKey = identity
		auth.SSHPassphrase = auth.Password
	}
	return auth
}
