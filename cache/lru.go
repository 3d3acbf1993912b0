package cache

// lruList is the eviction order of the disk tier: every unpinned entry,
// least recently used first, linked through the entries themselves so
// that every operation is O(1) and allocates nothing (a node may cache
// millions of small objects, and every eviction and every open/close of
// one of them passes here under Cache.mu).
//
// An entry is in the list exactly when its pins are 0; its atime is when
// it was last pinned or released, so appending at release keeps the list
// sorted by atime. GUARDED_BY(Cache.mu), like the links in entry.
type lruList struct {
	head, tail *entry
	n          int
}

func (l *lruList) linked(e *entry) bool { return e.lruPrev != nil || e.lruNext != nil || l.head == e }

// pushBack appends e as the most recently used entry.
func (l *lruList) pushBack(e *entry) {
	e.lruPrev, e.lruNext = l.tail, nil
	if l.tail != nil {
		l.tail.lruNext = e
	} else {
		l.head = e
	}
	l.tail = e
	l.n++
}

// remove unlinks e if it is linked.
func (l *lruList) remove(e *entry) {
	if !l.linked(e) {
		return
	}
	if e.lruPrev != nil {
		e.lruPrev.lruNext = e.lruNext
	} else {
		l.head = e.lruNext
	}
	if e.lruNext != nil {
		e.lruNext.lruPrev = e.lruPrev
	} else {
		l.tail = e.lruPrev
	}
	e.lruPrev, e.lruNext = nil, nil
	l.n--
}

// front is the least recently used entry, or nil.
func (l *lruList) front() *entry { return l.head }
