// Package seal encrypts what must be kept but never shown: the unmasked input
// of a task, which only its handler reads. It also derives the keyed hash
// that recognises a resubmitted payload without storing the payload.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// KeySize is the length of a key in bytes (AES-256).
const KeySize = 32

// Sealer encrypts with AES-256-GCM.
type Sealer struct {
	aead    cipher.AEAD
	hashKey []byte
	// macs are keyed hashes of hashKey to reuse (Hash).
	macs sync.Pool
}

// New returns a Sealer for a 32-byte key.
func New(key []byte) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal: key must be %d bytes, got %d", KeySize, len(key))
	}
	encKey := derive(key, "taskgraph seal v1")
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	sl := &Sealer{aead: aead, hashKey: derive(key, "taskgraph hash v1")}
	sl.macs.New = func() any { return hmac.New(sha256.New, sl.hashKey) }
	return sl, nil
}

func derive(key []byte, label string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// ParseKey reads a key written as 64 hex characters.
func ParseKey(s string) ([]byte, error) {
	key, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("seal: a key is %d hex characters", 2*KeySize)
	}
	return key, nil
}

// LoadOrCreateKey reads the key file at path, creating it with a random key
// (mode 0600) when it does not exist.
func LoadOrCreateKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return ParseKey(string(b))
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("seal: read key: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	// Write a temporary file and link it into place: the link appears
	// complete or not at all, and fails if another process linked its key
	// first, so nobody reads a half-written file and everyone ends up
	// with the same key.
	f, err := os.CreateTemp(filepath.Dir(path), ".seal-key-*")
	if err != nil {
		return nil, fmt.Errorf("seal: create key: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("seal: write key: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, os.ErrExist) {
			// Another process created it first; use theirs.
			return LoadOrCreateKey(path)
		}
		return nil, fmt.Errorf("seal: create key: %w", err)
	}
	return key, nil
}

// Seal encrypts plaintext; the nonce is prepended.
func (s *Sealer) Seal(plaintext []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plaintext, nil)
}

// Open decrypts what Seal produced.
func (s *Sealer) Open(sealed []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("seal: ciphertext too short")
	}
	out, err := s.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return nil, errors.New("seal: cannot decrypt (was it sealed with another key? every node must share the secret key)")
	}
	return out, nil
}

// Hash returns a keyed hash of parts, hex-encoded: each part as its length,
// a colon and its bytes. The keyed hashes are reused (a pool): a batch
// create hashes every item's input and key.
func (s *Sealer) Hash(parts ...[]byte) string {
	m := s.macs.Get().(hash.Hash)
	defer s.macs.Put(m)
	m.Reset()
	var n [20]byte
	for _, p := range parts {
		m.Write(append(strconv.AppendInt(n[:0], int64(len(p)), 10), ':'))
		m.Write(p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0]))
}
