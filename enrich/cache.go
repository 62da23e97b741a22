package enrich

import (
	"container/list"
	"sync"
	"time"
)

// cache is a bounded LRU of lookup results, found rows and misses alike, each with its own
// expiry. It is safe for concurrent use: lookups fill it from their goroutines.
type cache[T any] struct {
	size        int
	ttl, negTTL time.Duration

	mu struct {
		sync.Mutex
		entries map[string]*list.Element
		lru     *list.List // front: most recently used
	}
}

type cacheEntry[T any] struct {
	key     string
	row     T
	found   bool
	expires time.Time // zero: until evicted
}

func newCache[T any](size int, ttl, negTTL time.Duration) *cache[T] {
	c := &cache[T]{size: size, ttl: ttl, negTTL: negTTL}
	c.mu.entries = map[string]*list.Element{}
	c.mu.lru = list.New()
	return c
}

// get returns the cached result of key and whether there is a fresh one.
func (c *cache[T]) get(key string, now time.Time) (row T, found, hit bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.mu.entries[key]
	if !ok {
		return row, false, false
	}
	e := el.Value.(*cacheEntry[T])
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.removeLocked(el)
		return row, false, false
	}
	c.mu.lru.MoveToFront(el)
	return e.row, e.found, true
}

// put caches a result and reports whether an older entry had to make room.
func (c *cache[T]) put(key string, row T, found bool, now time.Time) (evicted bool) {
	ttl := c.ttl
	if !found {
		ttl = c.negTTL
	}
	e := &cacheEntry[T]{key: key, row: row, found: found}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.entries[key]; ok {
		el.Value = e
		c.mu.lru.MoveToFront(el)
		return false
	}
	c.mu.entries[key] = c.mu.lru.PushFront(e)
	if c.mu.lru.Len() <= c.size {
		return false
	}
	c.removeLocked(c.mu.lru.Back())
	return true
}

// evict drops key and reports whether it was cached.
func (c *cache[T]) evict(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.mu.entries[key]
	if ok {
		c.removeLocked(el)
	}
	return ok
}

func (c *cache[T]) removeLocked(el *list.Element) {
	delete(c.mu.entries, el.Value.(*cacheEntry[T]).key)
	c.mu.lru.Remove(el)
}

// clear drops every entry and returns how many there were.
func (c *cache[T]) clear() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.mu.lru.Len()
	clear(c.mu.entries)
	c.mu.lru.Init()
	return n
}
