// A stand-in with the shape of seed 004's Go Parquet writer (not Arrow, not Parquet: standard
// library only, so that it builds offline in seconds): ArrowBackend.WriteBatch buffers rows,
// flushRecordBatch encodes and compresses a batch and writes it, Close flushes the rest.
// Used by docs/user-guide.md to show what wprof does with a Go program today.
//
//	go build -o parquet-standin main.go   (no go.mod needed: standard library only)
//	./parquet-standin -rows 200000 -batch 10000 -workers 1
package main

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

type ArrowBackend struct {
	f     *os.File
	batch int
	rows  []int64
	buf   bytes.Buffer
	zw    *flate.Writer
}

func NewArrowBackend(path string, batch int) (*ArrowBackend, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	b := &ArrowBackend{f: f, batch: batch, rows: make([]int64, 0, batch)}
	b.zw, _ = flate.NewWriter(&b.buf, flate.BestSpeed)
	return b, nil
}

//go:noinline
func (b *ArrowBackend) WriteBatch(rows []int64) error {
	for _, r := range rows {
		b.rows = append(b.rows, r)
		if len(b.rows) == b.batch {
			if err := b.flushRecordBatch(); err != nil {
				return err
			}
		}
	}
	return nil
}

//go:noinline
func (b *ArrowBackend) flushRecordBatch() error {
	b.buf.Reset()
	b.zw.Reset(&b.buf)
	var tmp [8]byte
	for _, r := range b.rows {
		binary.LittleEndian.PutUint64(tmp[:], uint64(r))
		b.zw.Write(tmp[:])
	}
	b.zw.Close()
	b.rows = b.rows[:0]
	_, err := b.f.Write(b.buf.Bytes())
	return err
}

//go:noinline
func (b *ArrowBackend) Close() error {
	if len(b.rows) > 0 {
		if err := b.flushRecordBatch(); err != nil {
			return err
		}
	}
	return b.f.Close()
}

func main() {
	rows := flag.Int("rows", 200000, "rows per worker")
	batch := flag.Int("batch", 10000, "rows per record batch")
	chunk := flag.Int("chunk", 1000, "rows per WriteBatch call")
	workers := flag.Int("workers", 1, "goroutines, each writing its own file")
	dir := flag.String("dir", os.TempDir(), "output directory")
	flag.Parse()

	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			b, err := NewArrowBackend(filepath.Join(*dir, fmt.Sprintf("standin-%d.bin", w)), *batch)
			if err != nil {
				panic(err)
			}
			in := make([]int64, *chunk)
			for done := 0; done < *rows; done += *chunk {
				for i := range in {
					in[i] = int64(done + i)
				}
				if err := b.WriteBatch(in); err != nil {
					panic(err)
				}
			}
			if err := b.Close(); err != nil {
				panic(err)
			}
		}(w)
	}
	wg.Wait()
	el := time.Since(start)
	total := *rows * *workers
	fmt.Printf("parquet-standin: workers=%d rows=%d elapsed_ms=%.1f rows_per_s=%.0f\n",
		*workers, total, float64(el.Microseconds())/1000, float64(total)/el.Seconds())
}
