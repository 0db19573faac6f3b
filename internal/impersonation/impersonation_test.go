package impersonation

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// built is what the test's Build returns: the user its config impersonates.
type built struct{ user string }

func newCache(t *testing.T, max int, missing ...string) (*Cache[*built], *rest.Config) {
	t.Helper()
	base := &rest.Config{Host: "https://example.invalid", BearerToken: "controller-token"}
	return New(base, Options[*built]{
		Build: func(cfg *rest.Config) (*built, error) { return &built{user: cfg.Impersonate.UserName}, nil },
		Exists: func(_ context.Context, namespace, name string) (bool, error) {
			for _, m := range missing {
				if m == namespace+"/"+name {
					return false, nil
				}
			}
			return true, nil
		},
		Max: max,
	}), base
}

func app(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func TestAppsNamingTheSameServiceAccountShareOneClient(t *testing.T) {
	c, base := newCache(t, 0)
	ctx := context.Background()
	a, err := c.For(ctx, app("team-a", "one"), "deployer")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.For(ctx, app("team-a", "two"), "deployer")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := c.For(ctx, app("team-a", "one"), "deployer")
	if a != b || a != again {
		t.Error("Apps naming the same ServiceAccount got different clients")
	}
	if a.user != "system:serviceaccount:team-a:deployer" {
		t.Errorf("the client acts as %q", a.user)
	}
	if base.Impersonate.UserName != "" {
		t.Errorf("the controller's own config was changed to impersonate %q", base.Impersonate.UserName)
	}
	other, _ := c.For(ctx, app("team-b", "one"), "deployer")
	if other == a || other.user != "system:serviceaccount:team-b:deployer" {
		t.Errorf("an App in another namespace got %q: a ServiceAccount is the App's namespace's", other.user)
	}
	if entries, builds := c.Stats(); entries != 2 || builds != 2 {
		t.Errorf("entries, builds = %d, %d; want 2, 2", entries, builds)
	}
}

func TestAClientIsDroppedWhenNoAppUsesIt(t *testing.T) {
	c, _ := newCache(t, 0)
	ctx := context.Background()
	one, two := app("team-a", "one"), app("team-a", "two")
	_, _ = c.For(ctx, one, "deployer")
	_, _ = c.For(ctx, two, "deployer")
	c.Release(one)
	if entries, _ := c.Stats(); entries != 1 {
		t.Fatalf("entries = %d after one of two Apps left, want 1", entries)
	}
	_, _ = c.For(ctx, two, "reader") // the App now names another ServiceAccount
	if entries, _ := c.Stats(); entries != 1 {
		t.Errorf("entries = %d after the last App moved to another ServiceAccount, want 1 (the new one)", entries)
	}
	c.Release(two)
	if entries, _ := c.Stats(); entries != 0 {
		t.Errorf("entries = %d after every App left, want 0", entries)
	}
}

func TestTheCacheIsBounded(t *testing.T) {
	c, _ := newCache(t, 2)
	ctx := context.Background()
	for _, sa := range []string{"a", "b", "c"} {
		if _, err := c.For(ctx, app("ns", "app-"+sa), sa); err != nil {
			t.Fatal(err)
		}
	}
	if entries, builds := c.Stats(); entries != 2 || builds != 3 {
		t.Fatalf("entries, builds = %d, %d; want 2, 3", entries, builds)
	}
	// The least recently used (a) was dropped: its App gets a new one.
	got, err := c.For(ctx, app("ns", "app-a"), "a")
	if err != nil || got.user != "system:serviceaccount:ns:a" {
		t.Fatalf("after eviction: %v, %v", got, err)
	}
	if entries, builds := c.Stats(); entries != 2 || builds != 4 {
		t.Errorf("entries, builds = %d, %d; want 2, 4", entries, builds)
	}
}

func TestAMissingServiceAccountIsAnErrorNamingItNeverTheControllersRights(t *testing.T) {
	c, _ := newCache(t, 0, "team-a/ghost")
	got, err := c.For(context.Background(), app("team-a", "one"), "ghost")
	if !errors.Is(err, ErrServiceAccountNotFound) || got != nil {
		t.Fatalf("For(missing) = %v, %v; want ErrServiceAccountNotFound and nothing", got, err)
	}
	if !strings.Contains(err.Error(), "team-a/ghost") || !strings.Contains(err.Error(), "system:serviceaccount:team-a:ghost") {
		t.Errorf("error %q does not name the ServiceAccount and its user", err)
	}
	if _, builds := c.Stats(); builds != 0 {
		t.Errorf("%d clients built for a missing ServiceAccount", builds)
	}
}

func TestTheDefaultBoundIs1024ServiceAccounts(t *testing.T) {
	c, _ := newCache(t, 0)
	ctx := context.Background()
	for i := range 1100 {
		sa := "sa-" + strconv.Itoa(i)
		if _, err := c.For(ctx, app("ns", "app-"+strconv.Itoa(i)), sa); err != nil {
			t.Fatal(err)
		}
	}
	if entries, builds := c.Stats(); entries != 1024 || builds != 1100 {
		t.Errorf("entries, builds = %d, %d; want 1024, 1100", entries, builds)
	}
}
