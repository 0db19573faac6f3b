package source

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// partsDigest is the hex SHA-256 of parts, each prefixed with its length,
// so that no two lists of parts digest alike (a separator that a part may
// itself hold could make "a\x00b"+"c" and "a"+"b\x00c" one key).
func partsDigest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}
