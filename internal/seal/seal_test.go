package seal_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/taskgraph/taskgraph/internal/seal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newKey(t *testing.T) []byte {
	t.Helper()
	key := make([]byte, seal.KeySize)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return key
}

func setup(t *testing.T) *seal.Sealer {
	t.Helper()
	s, err := seal.New(newKey(t))
	require.NoError(t, err)
	return s
}

func TestSealer(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		for _, plain := range [][]byte{nil, []byte("x"), []byte(`{"phone":"13800138000"}`), bytes.Repeat([]byte{0, 1, 2}, 10000)} {
			sealed := s.Seal(plain)
			if len(plain) >= 16 { // shorter ones may occur by chance
				require.False(t, bytes.Contains(sealed, plain), "ciphertext contains the plaintext")
			}
			got, err := s.Open(sealed)
			require.NoError(t, err)
			require.Equal(t, string(plain), string(got))
		}
	})

	t.Run("UsesAFreshNonceEveryTime", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		require.NotEqual(t, s.Seal([]byte("same")), s.Seal([]byte("same")))
	})

	t.Run("RejectsTamperedCiphertext", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		sealed := s.Seal([]byte("the unmasked input"))
		for i := range sealed {
			bad := bytes.Clone(sealed)
			bad[i] ^= 0x01
			_, err := s.Open(bad)
			require.Error(t, err, "flipped a bit of byte %d", i)
		}
		_, err := s.Open(sealed[:len(sealed)-1])
		require.Error(t, err)
		_, err = s.Open(sealed[:5])
		require.EqualError(t, err, "seal: ciphertext too short")
		_, err = s.Open(nil)
		require.Error(t, err)
	})

	t.Run("RejectsAnotherKeyWithTheDocumentedMessage", func(t *testing.T) {
		t.Parallel()
		sealed := setup(t).Seal([]byte("secret"))
		_, err := setup(t).Open(sealed)
		require.EqualError(t, err, "seal: cannot decrypt (was it sealed with another key? every node must share the secret key)")
	})

	t.Run("OpensWithTheSameKeyInANewSealer", func(t *testing.T) {
		t.Parallel()
		key := newKey(t)
		a, err := seal.New(key)
		require.NoError(t, err)
		b, err := seal.New(bytes.Clone(key))
		require.NoError(t, err)
		got, err := b.Open(a.Seal([]byte("shared")))
		require.NoError(t, err)
		require.Equal(t, "shared", string(got))
		require.Equal(t, a.Hash([]byte("x")), b.Hash([]byte("x")))
	})

	t.Run("RejectsKeysOfTheWrongSize", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{0, 16, 31, 33, 64} {
			_, err := seal.New(make([]byte, n))
			require.Error(t, err, "%d bytes", n)
		}
	})
}

func TestHash(t *testing.T) {
	t.Parallel()

	t.Run("IsKeyed", func(t *testing.T) {
		t.Parallel()
		a, b := setup(t), setup(t)
		require.NotEqual(t, a.Hash([]byte("payload")), b.Hash([]byte("payload")))
	})

	t.Run("StaysWhatStoredHashesWere", func(t *testing.T) {
		t.Parallel()
		// Stored input and idempotency hashes are compared with new ones:
		// the format (each part's length, a colon, its bytes) never changes.
		key := make([]byte, seal.KeySize)
		for i := range key {
			key[i] = byte(i)
		}
		s, err := seal.New(key)
		require.NoError(t, err)
		require.Equal(t, "0f76d354fbd87adbd2439e02f2439937b29db5f0d335b07144281966aa431bb4", s.Hash([]byte("type"), []byte(""), []byte(`{"a":1}`)))
		require.Equal(t, "711954514ba8d84e3ca5a5ee35cb8cc0960f38fcb611105f3c594882e5f6ee5c", s.Hash())
	})

	t.Run("IsDeterministicHex", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		h := s.Hash([]byte("type"), []byte("biz"), []byte(`{}`))
		require.Equal(t, h, s.Hash([]byte("type"), []byte("biz"), []byte(`{}`)))
		raw, err := hex.DecodeString(h)
		require.NoError(t, err)
		require.Len(t, raw, 32)
	})

	t.Run("IsUnambiguous", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		require.NotEqual(t, s.Hash([]byte("ab"), []byte("c")), s.Hash([]byte("a"), []byte("bc")))
		require.NotEqual(t, s.Hash([]byte("abc")), s.Hash([]byte("ab"), []byte("c")))
		require.NotEqual(t, s.Hash([]byte("a"), nil), s.Hash([]byte("a")))
		require.NotEqual(t, s.Hash(nil, []byte("a")), s.Hash([]byte("a"), nil))
		// A part that looks like a length prefix cannot forge a boundary.
		require.NotEqual(t, s.Hash([]byte("1:a"), []byte("b")), s.Hash([]byte("1:a1:b")))
	})

	t.Run("DiffersFromTheEncryptionKey", func(t *testing.T) {
		t.Parallel()
		key := newKey(t)
		s, err := seal.New(key)
		require.NoError(t, err)
		require.NotContains(t, s.Hash([]byte("x")), hex.EncodeToString(key))
	})
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("ab", seal.KeySize)

	t.Run("AcceptsSixtyFourHexCharacters", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{good, strings.ToUpper(good), good + "\n", "  " + good + "\r\n"} {
			key, err := seal.ParseKey(s)
			require.NoError(t, err, "%q", s)
			require.Equal(t, bytes.Repeat([]byte{0xab}, seal.KeySize), key)
		}
	})

	t.Run("RejectsBadInput", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{"", "  \n", good[:62], good + "ab", good[:63], "zz" + good[2:], good[:32] + " " + good[32:], "0x" + good[2:]} {
			_, err := seal.ParseKey(s)
			require.EqualError(t, err, "seal: a key is 64 hex characters", "%q", s)
		}
	})
}

func TestLoadOrCreateKey(t *testing.T) {
	t.Parallel()

	t.Run("CreatesAPrivateFileOnceAndReadsItBack", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "conf", "seal.key")
		key, err := seal.LoadOrCreateKey(path)
		require.NoError(t, err)
		require.Len(t, key, seal.KeySize)

		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		dir, err := os.Stat(filepath.Dir(path))
		require.NoError(t, err)
		require.Zero(t, dir.Mode().Perm()&0o077, "key directory is private")

		again, err := seal.LoadOrCreateKey(path)
		require.NoError(t, err)
		require.Equal(t, key, again)

		b, err := os.ReadFile(path)
		require.NoError(t, err)
		parsed, err := seal.ParseKey(string(b))
		require.NoError(t, err)
		require.Equal(t, key, parsed)
	})

	t.Run("ReadsAnExistingKey", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "seal.key")
		want := newKey(t)
		require.NoError(t, os.WriteFile(path, []byte(hex.EncodeToString(want)+"\n"), 0o600))
		key, err := seal.LoadOrCreateKey(path)
		require.NoError(t, err)
		require.Equal(t, want, key)
	})

	t.Run("RejectsACorruptFile", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "seal.key")
		require.NoError(t, os.WriteFile(path, []byte("not a key\n"), 0o600))
		_, err := seal.LoadOrCreateKey(path)
		require.Error(t, err)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "not a key\n", string(b), "a corrupt key file is never overwritten")
	})

	t.Run("GivesConcurrentCallersOneKey", func(t *testing.T) {
		t.Parallel()
		// Nodes starting together on a shared volume race to create the
		// file; none may read it half-written, all must use one key.
		for round := range 50 {
			path := filepath.Join(t.TempDir(), "seal.key")
			const callers = 8
			keys := make([][]byte, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { keys[i], errs[i] = seal.LoadOrCreateKey(path) })
			}
			wg.Wait()
			for i := range callers {
				require.NoError(t, errs[i], "round %d, caller %d", round, i)
				require.Equal(t, keys[0], keys[i], "round %d, caller %d", round, i)
			}
			entries, err := os.ReadDir(filepath.Dir(path))
			require.NoError(t, err)
			require.Len(t, entries, 1, "only the key file is left")
		}
	})
}
