package lines

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cut last line is dropped, however long; whole lines are kept, and an
// empty file or one of a single cut line ends empty.
func TestDropCut(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // beyond one read from the end
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"whole", "a\nb\n", "a\nb\n"},
		{"cut", "a\nb\nc", "a\nb\n"},
		{"cut long", "a\n" + long, "a\n"},
		{"after a long line", long + "\nc", long + "\n"},
		{"only a cut line", long, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			require.NoError(t, os.WriteFile(path, []byte(tc.in), 0o600))
			f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
			require.NoError(t, err)
			defer f.Close()
			whole, err := Whole(f)
			require.NoError(t, err)
			require.Equal(t, int64(len(tc.want)), whole)
			require.NoError(t, DropCut(f))
			_, err = f.WriteString("next\n")
			require.NoError(t, err)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, tc.want+"next\n", string(b))
		})
	}
}
