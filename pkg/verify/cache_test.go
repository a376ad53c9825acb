package verify

import (
	"fmt"
	"testing"
)

// TestCacheBounded compiles more distinct expressions than the cache holds:
// memory stays bounded whatever tenants write, and a cached expression,
// valid or not, gives the same answer again.
func TestCacheBounded(t *testing.T) {
	for i := range cacheSize + 50 {
		if err := Check(fmt.Sprintf("response.code == %d", i)); err != nil {
			t.Fatal(err)
		}
		if err := Check(fmt.Sprintf("response.code == %d &&", i)); err == nil {
			t.Fatal("a syntax error compiled")
		}
	}
	if n := cache.Len(); n > cacheSize {
		t.Fatalf("cache holds %d programs, want at most %d", n, cacheSize)
	}
	p1, err1 := Compile("response.code == 7")
	p2, err2 := Compile("response.code == 7")
	if err1 != nil || err2 != nil || p1 != p2 {
		t.Fatalf("a cached program is not reused: %p %v, %p %v", p1, err1, p2, err2)
	}
}
