package testenv

import "testing"

func TestNamesFolderMatchesTheFolderNotAPrefixOfIt(t *testing.T) {
	const dir = "/tmp/plumb-cluster-12"
	for _, tt := range []struct {
		args []string
		want bool
	}{
		{[]string{"--data-dir=/tmp/plumb-cluster-12/etcd"}, true},
		{[]string{"--cert-dir", "/tmp/plumb-cluster-12/pki"}, true},
		{[]string{"/tmp/plumb-cluster-12"}, true},
		{[]string{"--data-dir=/tmp/plumb-cluster-123/etcd"}, false},
		{[]string{"--name=x", "/tmp/plumb-cluster-1/pki"}, false},
	} {
		if got := namesFolder(tt.args, dir); got != tt.want {
			t.Errorf("namesFolder(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}
