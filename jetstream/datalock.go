package jetstream

import (
	"errors"
	"fmt"
	"os"

	"github.com/laboro-go/laboro/internal/dirlock"
)

// lockDir takes dir for this process until the returned file is closed
// (or the process ends): an error matching ErrDataInUse while another
// process holds it.
func lockDir(dir string) (*os.File, error) {
	f, err := dirlock.Lock(dir)
	if errors.Is(err, dirlock.ErrHeld) {
		return nil, fmt.Errorf("%w: %s", ErrDataInUse, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	return f, nil
}
