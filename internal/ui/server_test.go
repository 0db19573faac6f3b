package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTheSessionToken: the printed URL's token buys a Lax, HttpOnly
// cookie and a redirect to the same page without it (never to another
// host); a wrong token, or no cookie, is refused.
func TestTheSessionToken(t *testing.T) {
	s, err := New(Options{Identity: Local{Viewer: &Viewer{Name: "you", Key: "local"}}, Token: "t0ken"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	do := func(target string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:9400/", nil)
		r.URL.Path, r.URL.RawQuery, _ = strings.Cut(target, "?")
		r.RequestURI = target
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	got := do("//evil.example/?token=t0ken&namespace=shop")
	cookies := got.Result().Cookies()
	if got.Code != http.StatusSeeOther || got.Header().Get("Location") != "/evil.example/?namespace=shop" {
		t.Errorf("the token URL: %d to %q, want 303 to /evil.example/?namespace=shop (this host)", got.Code, got.Header().Get("Location"))
	}
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode || cookies[0].Value != "t0ken" {
		t.Fatalf("cookies %+v, want one HttpOnly Lax session cookie", cookies)
	}
	if got := do("/?token=wrong"); got.Code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", got.Code)
	}
	if got := do("/static/style.css"); got.Code != http.StatusUnauthorized {
		t.Errorf("no cookie: %d, want 401", got.Code)
	}
	if got := do("/static/style.css", cookies[0]); got.Code != http.StatusOK {
		t.Errorf("with the cookie: %d, want 200", got.Code)
	}
	forged := *cookies[0]
	forged.Value = "guess"
	if got := do("/static/style.css", &forged); got.Code != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d, want 401", got.Code)
	}
}
