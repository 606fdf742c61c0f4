package workerserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// The updates that come in while a commit is under way go together in the
// next one: one transaction, one sync, each update's own result; one that
// fails fails alone, and one that changed nothing does not hold the others
// back.
func TestCommitterGroups(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "t.db"), 0o600, nil)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	c := &committer{db: db}
	put := func(key string) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(key), []byte(fmt.Sprint(tx.ID())))
		}
	}

	// The first update holds its commit until the others wait.
	release, first := holdCommit(c, put("first"))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			switch i {
			case 3:
				errs[i] = c.update(func(tx *bolt.Tx) error {
					if err := put("bad")(tx); err != nil {
						return err
					}
					return errors.New("refused")
				})
			case 5:
				errs[i] = c.update(func(*bolt.Tx) error { return errNoChange })
			default:
				errs[i] = c.update(put(fmt.Sprint("k", i)))
			}
		})
	}
	awaitPending(c, n)
	close(release)
	require.NoError(t, <-first)
	wg.Wait()

	txs := map[string]int{}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for i := range n {
			v := b.Get([]byte(fmt.Sprint("k", i)))
			switch i {
			case 3:
				assert.EqualError(t, errs[i], "refused")
			case 5:
				assert.ErrorIs(t, errs[i], errNoChange)
			default:
				assert.NoError(t, errs[i])
				require.NotNil(t, v, "update %d lost", i)
				txs[string(v)]++
			}
		}
		assert.Nil(t, b.Get([]byte("bad")), "the failed update's write was committed")
		return nil
	}))
	// After the failure, the group's updates ran one by one; then each
	// has its own transaction.
	assert.Len(t, txs, n-2)

	// Without a failure, they share one.
	release, first = holdCommit(c, func(*bolt.Tx) error { return nil })
	for i := range n {
		wg.Go(func() {
			if i == 5 {
				errs[i] = c.update(func(*bolt.Tx) error { return errNoChange })
				return
			}
			errs[i] = c.update(put(fmt.Sprint("g", i)))
		})
	}
	awaitPending(c, n)
	close(release)
	require.NoError(t, <-first)
	wg.Wait()
	txs = map[string]int{}
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		for i := range n {
			if i == 5 {
				assert.ErrorIs(t, errs[i], errNoChange)
				continue
			}
			assert.NoError(t, errs[i])
			v := b.Get([]byte(fmt.Sprint("g", i)))
			require.NotNil(t, v, "update %d lost", i)
			txs[string(v)]++
		}
		return nil
	}))
	assert.Len(t, txs, 1, "the updates that waited were not committed together")
}

// holdCommit starts an update of c that, once its commit is under way,
// waits for release before fn; its error comes on the channel.
func holdCommit(c *committer, fn func(*bolt.Tx) error) (release chan struct{}, result chan error) {
	release, result = make(chan struct{}), make(chan error, 1)
	entered := make(chan struct{})
	go func() {
		result <- c.update(func(tx *bolt.Tx) error {
			close(entered)
			<-release
			return fn(tx)
		})
	}()
	<-entered
	return release, result
}

// awaitPending returns once n updates wait for c's next commit.
func awaitPending(c *committer, n int) {
	for {
		c.mu.Lock()
		waiting := len(c.pending)
		c.mu.Unlock()
		if waiting == n {
			return
		}
		runtime.Gosched()
	}
}
