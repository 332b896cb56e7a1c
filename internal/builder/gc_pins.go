package builder

import "sync"

// pins are what builds in progress read outside their own build
// directory: the template trees their steps stack as the lowest overlay
// layer (a build FROM another template, the base template included), and
// their template's uploaded files. The collector keeps whatever is pinned.
type pins struct {
	mu sync.Mutex
	// trees counts builds per template tree path.
	trees map[string]int
	// templates counts builds per template ID.
	templates map[string]int
}

// pinTemplate marks a build of templateID in progress until the returned
// function is called.
func (b *Builder) pinTemplate(templateID string) (unpin func()) {
	return b.pin(func(p *pins) map[string]int { return p.templates }, templateID)
}

// pinTree marks tree as read by a build in progress until the returned
// function is called.
func (b *Builder) pinTree(tree string) (unpin func()) {
	return b.pin(func(p *pins) map[string]int { return p.trees }, tree)
}

func (b *Builder) pin(which func(*pins) map[string]int, k string) func() {
	b.pins.mu.Lock()
	if b.pins.trees == nil {
		b.pins.trees, b.pins.templates = map[string]int{}, map[string]int{}
	}
	which(&b.pins)[k]++
	b.pins.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.pins.mu.Lock()
			defer b.pins.mu.Unlock()
			m := which(&b.pins)
			if m[k]--; m[k] <= 0 {
				delete(m, k)
			}
		})
	}
}

// pinned returns the pinned trees and templates.
func (b *Builder) pinned() (trees, templates map[string]bool) {
	b.pins.mu.Lock()
	defer b.pins.mu.Unlock()
	trees, templates = map[string]bool{}, map[string]bool{}
	for k := range b.pins.trees {
		trees[k] = true
	}
	for k := range b.pins.templates {
		templates[k] = true
	}
	return trees, templates
}
