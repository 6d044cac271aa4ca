// A Go program linked dynamically (cgo, as any Go program that imports
// `net` is by default): four goroutines call `spinA` and `spinB` for
// three seconds of wall time, then it exits through the Go runtime,
// which calls exit_group itself rather than the C library's exit.
package main

// #include <stdlib.h>
import "C"

import (
	"fmt"
	"sync"
	"time"
)

//go:noinline
func spinA(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 7
	}
	return s
}

//go:noinline
func spinB(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s ^= i * 31
	}
	return s
}

func main() {
	C.free(C.malloc(1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	deadline := time.Now().Add(3 * time.Second)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				x := spinA(200000) + spinB(100000)
				mu.Lock()
				total += x
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Println("go_spin done", total != 0)
}
