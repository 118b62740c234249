package memfs

import "sort"

// directory is a directory's entries: by name, and in cookie order for
// ReadDir. A name's cookie is given when the name is linked and kept while
// it stays (RENAME_EXCHANGE keeps both), so a listing resumed after any
// cookie neither repeats nor skips the names that stayed.
type directory struct {
	parent uint64 // the directory holding this one (the root: itself)
	ents   map[string]entry
	order  []slot // ascending cookies; removed names stay as gone until compacted
	gone   int    // gone slots in order
	cookie uint64 // the last cookie given
}

type entry struct {
	ino, cookie uint64
}

type slot struct {
	cookie uint64
	name   string
	gone   bool
}

// link adds name (which must not exist) with the next cookie.
func (d *directory) link(name string, ino uint64) {
	d.cookie++
	d.ents[name] = entry{ino: ino, cookie: d.cookie}
	d.order = append(d.order, slot{cookie: d.cookie, name: name})
}

// unlink removes name, which must exist.
func (d *directory) unlink(name string) {
	e := d.ents[name]
	delete(d.ents, name)
	i := sort.Search(len(d.order), func(i int) bool { return d.order[i].cookie >= e.cookie })
	d.order[i].gone = true
	d.order[i].name = ""
	d.gone++
	if d.gone > 64 && d.gone > len(d.order)/2 {
		live := d.order[:0]
		for _, s := range d.order {
			if !s.gone {
				live = append(live, s)
			}
		}
		clear(d.order[len(live):])
		d.order, d.gone = live, 0
	}
}

// chunkSize is the unit of a file's content: a write allocates (part of)
// the chunks it touches; a chunk never written is a hole.
const chunkSize = 1 << 20

// content is a regular file's bytes: size bytes, of which chunk i holds
// those from i*chunkSize up to its length; the rest are zeros.
type content struct {
	size   uint64
	alloc  uint64 // sum of the chunks' lengths
	chunks map[uint64][]byte
}

// read copies the bytes at off into p, returning how many there were
// (fewer than len(p) only at the end of the file).
func (c *content) read(p []byte, off uint64) int {
	if off >= c.size {
		return 0
	}
	n := int(min(uint64(len(p)), c.size-off))
	for done := 0; done < n; {
		o := off + uint64(done)
		in := int(o % chunkSize)
		dst := p[done : done+min(n-done, chunkSize-in)]
		k := 0
		if ch := c.chunks[o/chunkSize]; in < len(ch) {
			k = copy(dst, ch[in:])
		}
		clear(dst[k:])
		done += len(dst)
	}
	return n
}

// write writes p at off, extending the file if needed.
func (c *content) write(p []byte, off uint64) {
	if c.chunks == nil {
		c.chunks = map[uint64][]byte{}
	}
	for done := 0; done < len(p); {
		o := off + uint64(done)
		i, in := o/chunkSize, int(o%chunkSize)
		src := p[done : done+min(len(p)-done, chunkSize-in)]
		ch := c.chunks[i]
		if end := in + len(src); end > len(ch) {
			c.alloc += uint64(end - len(ch))
			if end <= cap(ch) {
				old := len(ch)
				ch = ch[:end]
				clear(ch[old:]) // left there by a truncate
			} else {
				grown := make([]byte, end, min(chunkSize, max(end, 2*cap(ch))))
				copy(grown, ch)
				ch = grown
			}
			c.chunks[i] = ch
		}
		copy(ch[in:], src)
		done += len(src)
	}
	c.size = max(c.size, off+uint64(len(p)))
}

// truncate sets the size; bytes past the old end read as zeros.
func (c *content) truncate(size uint64) {
	if size < c.size {
		for i, ch := range c.chunks {
			start := i * chunkSize
			switch {
			case start >= size:
				c.alloc -= uint64(len(ch))
				delete(c.chunks, i)
			case start+uint64(len(ch)) > size:
				c.alloc -= start + uint64(len(ch)) - size
				c.chunks[i] = ch[:size-start]
			}
		}
	}
	c.size = size
}
