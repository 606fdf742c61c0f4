package cli

import (
	"context"
	"iter"
)

// reader reads a sequence one item ahead in a goroutine of its own, so
// that its consumer can give up a read that blocks (a pipe whose writer is
// slow) when its context ends. The goroutine ends when the sequence ends,
// or, once close was called, when the sequence yields again.
type reader[T any] struct {
	items chan item[T] // closed when the sequence ends
	quit  chan struct{}
}

type item[T any] struct {
	v   T
	err error
}

// readAhead starts reading seq. The caller calls close when done.
func readAhead[T any](seq iter.Seq2[T, error]) *reader[T] {
	r := &reader[T]{items: make(chan item[T]), quit: make(chan struct{})}
	go func() {
		defer close(r.items)
		for v, err := range seq {
			select {
			case r.items <- item[T]{v, err}:
			case <-r.quit:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// What next found.
const (
	gotItem   = iota
	seqEnded  // the sequence ended
	ctxEnded  // ctx ended first
	stopFirst // stop was closed first
)

// next returns the next item, or why there is none. A nil stop never
// closes.
func (r *reader[T]) next(ctx context.Context, stop <-chan struct{}) (v T, state int, err error) {
	select {
	case it, ok := <-r.items:
		if !ok {
			return v, seqEnded, nil
		}
		return it.v, gotItem, it.err
	case <-ctx.Done():
		return v, ctxEnded, ctx.Err()
	case <-stop:
		return v, stopFirst, nil
	}
}

func (r *reader[T]) close() { close(r.quit) }

// ReadAhead returns seq read one item ahead in a goroutine, so that the
// end of ctx ends it at once, with ctx's error, even while a read of seq
// blocks: a command that reads its jobs from a pipe stops on Ctrl-C
// though the pipe's writer is slow to send the next line. The goroutine
// ends when seq ends, or yields again after the returned sequence ended.
func ReadAhead[T any](ctx context.Context, seq iter.Seq2[T, error]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		r := readAhead(seq)
		defer r.close()
		for {
			v, state, err := r.next(ctx, nil)
			if state == seqEnded || !yield(v, err) || err != nil {
				return
			}
		}
	}
}
