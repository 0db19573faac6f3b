package testenv

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// ScriptedObject is an object a ScriptedS3 lists and serves.
type ScriptedObject struct {
	// Key is the object's whole key, prefix included, as listed.
	Key string
	// ETag is the listed ETag (without quotes).
	ETag string
	// Size is the listed size.
	Size int64
	// Body is what a GET serves.
	Body string
	// ServedETag, when set, is the ETag a GET answers with, and the GET
	// then ignores If-Match, as a server that does not honour it would.
	ServedETag string
}

// ScriptedS3 is an HTTP server speaking the two S3 calls plumb makes
// (ListObjectsV2 of one page, GetObject) with what a test scripts: the
// behaviour of hostile or broken servers that no real S3 server shows (keys
// that escape a folder, negative sizes, ETags that do not match), and
// accounts that may list a bucket but not read its objects. Use StartS3 for
// everything a real server can do.
type ScriptedS3 struct {
	// Endpoint is host:port, plain HTTP.
	Endpoint string
	// Bucket is the one bucket it serves.
	Bucket string

	mu      sync.Mutex
	objects []ScriptedObject
	// readableBy is the access key that may GET objects ("": any).
	readableBy string
	gets       atomic.Int64
}

// StartScriptedS3 serves objects in bucket for a test; anyone may list,
// only readableBy's access key may read ("" lets anyone).
func StartScriptedS3(t testing.TB, bucket, readableBy string, objects []ScriptedObject) *ScriptedS3 {
	t.Helper()
	s := &ScriptedS3{Bucket: bucket, objects: objects, readableBy: readableBy}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.Endpoint = strings.TrimPrefix(srv.URL, "http://")
	return s
}

// SetObjects replaces what the server lists and serves.
func (s *ScriptedS3) SetObjects(objects []ScriptedObject) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objects = objects
}

// GETs counts the object downloads asked so far.
func (s *ScriptedS3) GETs() int64 { return s.gets.Load() }

type listResult struct {
	XMLName     xml.Name       `xml:"ListBucketResult"`
	Name        string         `xml:"Name"`
	Prefix      string         `xml:"Prefix"`
	KeyCount    int            `xml:"KeyCount"`
	MaxKeys     int            `xml:"MaxKeys"`
	IsTruncated bool           `xml:"IsTruncated"`
	Contents    []listedObject `xml:"Contents"`
}

type listedObject struct {
	Key  string `xml:"Key"`
	ETag string `xml:"ETag"`
	Size int64  `xml:"Size"`
}

func (s *ScriptedS3) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	objects := append([]ScriptedObject(nil), s.objects...)
	s.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/")
	if path == s.Bucket || path == s.Bucket+"/" {
		prefix := r.URL.Query().Get("prefix")
		res := listResult{Name: s.Bucket, Prefix: prefix, MaxKeys: 1000}
		for _, o := range objects { // all of them, under the prefix or not: the script decides
			res.Contents = append(res.Contents, listedObject{o.Key, `"` + o.ETag + `"`, o.Size})
		}
		res.KeyCount = len(res.Contents)
		w.Header().Set("Content-Type", "application/xml")
		_ = xml.NewEncoder(w).Encode(res)
		return
	}
	key, ok := strings.CutPrefix(path, s.Bucket+"/")
	if !ok || r.Method != http.MethodGet {
		http.Error(w, "not scripted", http.StatusNotImplemented)
		return
	}
	s.gets.Add(1)
	if s.readableBy != "" && !strings.Contains(r.Header.Get("Authorization"), "Credential="+s.readableBy+"/") {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
		return
	}
	for _, o := range objects {
		if o.Key != key {
			continue
		}
		etag := o.ETag
		if o.ServedETag != "" {
			etag = o.ServedETag
		} else if match := r.Header.Get("If-Match"); match != "" && strings.Trim(match, `"`) != o.ETag {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		w.Header().Set("ETag", `"`+etag+`"`)
		w.Header().Set("Last-Modified", "Sun, 06 Dec 2026 12:00:00 GMT")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", fmt.Sprint(len(o.Body)))
		fmt.Fprint(w, o.Body)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>`)
}
