package tree

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// ErrDecompressionBudget is an archive that decompresses to more bytes than
// the files its limits allow could hold (headers and padding included).
var ErrDecompressionBudget = errors.New("the archive decompresses to more than its files may hold")

// FromTarGzip reads a tar+gzip stream (an OCI layer, a Helm chart archive)
// into a tree within limits: regular files and symlinks; other entries
// (folders, hard links, devices) are skipped. The bytes decompressed are
// bounded too, skipped entries included, so that a decompression bomb
// costs bounded work and memory. It reads r only as far as the archive's
// end.
func FromTarGzip(r io.Reader, limits Limits) (*Tree, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	defer gz.Close()
	budget := int64(-1)
	if limits.MaxTotalBytes > 0 {
		// The content, plus a header and padding per file.
		budget = limits.MaxTotalBytes + int64(max(limits.MaxFiles, 1)+16)*2048
	}
	files := map[string][]byte{}
	b := NewBuilder(limits, func(key string) ([]byte, error) {
		if data, ok := files[key]; ok {
			return data, nil
		}
		return nil, fmt.Errorf("%s: not in the archive", key)
	})
	tr := tar.NewReader(&budgeted{r: gz, left: budget})
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, budgetOr(err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			if err := b.AddFile(h.Name, h.Size, h.Name); err != nil {
				return nil, err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, budgetOr(err)
			}
			files[h.Name] = data
		case tar.TypeSymlink:
			if err := b.AddSymlink(h.Name, h.Linkname); err != nil {
				return nil, err
			}
		}
	}
	return b.Build(), nil
}

// budgetOr is err, or ErrDecompressionBudget alone when err is (or wraps)
// it: archive/tar wraps what its reader gave.
func budgetOr(err error) error {
	if errors.Is(err, ErrDecompressionBudget) {
		return ErrDecompressionBudget
	}
	return err
}

// budgeted fails once more than left bytes were read (left < 0: no bound).
type budgeted struct {
	r    io.Reader
	left int64
}

func (b *budgeted) Read(p []byte) (int, error) {
	if b.left < 0 {
		return b.r.Read(p)
	}
	if b.left == 0 {
		return 0, ErrDecompressionBudget
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
