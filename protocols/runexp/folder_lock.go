package runexp

import (
	"errors"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/dirlock"
)

// ErrFolderBusy is returned by Folder.Lock when another process holds the
// folder: two managers on one folder would each run every job.
var ErrFolderBusy = errors.New("runexp: another manager serves this folder")

// Lock takes the folder for this process, until unlock is called or the
// process ends (however it ends: the lock is the kernel's, on the Outputs
// directory, which it creates if need be). It returns an error matching
// ErrFolderBusy while another process holds it.
func (f Folder) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(f.Outputs, 0o755); err != nil {
		return nil, err
	}
	dir, err := dirlock.Lock(f.Outputs)
	if errors.Is(err, dirlock.ErrHeld) {
		return nil, fmt.Errorf("%w (its outputs: %s)", ErrFolderBusy, f.Outputs)
	}
	if err != nil {
		return nil, fmt.Errorf("runexp: %w", err)
	}
	return func() { dir.Close() }, nil
}
