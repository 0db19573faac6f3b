package render

import "testing"

func TestIsHelmTest(t *testing.T) {
	for hook, want := range map[string]bool{
		"test": true, "test-success": true, " test ": true, "test,test-success": true, "Test": true, "test-failure": true,
		"": false, "pre-install": false, "pre-install,test": false, "post-install, test": false, "PRE-UPGRADE": false, "post-delete": false,
	} {
		if got := isHelmTest(hook); got != want {
			t.Errorf("isHelmTest(%q) = %v, want %v", hook, got, want)
		}
	}
}
