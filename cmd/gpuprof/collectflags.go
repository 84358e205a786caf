package main

import (
	"flag"
	"reflect"
	"time"
)

// collectorFlags are flags of gpuprof run that every collector gets as the
// gpuprof collect flag of the same name. Defining a flag here is what
// forwards it, so no flag can be defined and not forwarded, or forwarded
// under another name or format.
type collectorFlags struct {
	fs    *flag.FlagSet
	names []string                       // in the order they are forwarded
	paths map[string]func(string) string // made valid where the collectors start
}

func newCollectorFlags(fs *flag.FlagSet) *collectorFlags {
	return &collectorFlags{fs: fs, paths: map[string]func(string) string{}}
}

func (c *collectorFlags) add(name string) { c.names = append(c.names, name) }

// Path defines a flag naming files: its value is passed through abs
// (absPath, absList), since the collectors may start in another directory.
func (c *collectorFlags) Path(name, value, usage string, abs func(string) string) *string {
	p := c.String(name, value, usage)
	c.paths[name] = abs
	return p
}

func (c *collectorFlags) String(name, value, usage string) *string {
	c.add(name)
	return c.fs.String(name, value, usage)
}

func (c *collectorFlags) Int(name string, value int, usage string) *int {
	c.add(name)
	return c.fs.Int(name, value, usage)
}

func (c *collectorFlags) Uint64(name string, value uint64, usage string) *uint64 {
	c.add(name)
	return c.fs.Uint64(name, value, usage)
}

func (c *collectorFlags) Duration(name string, value time.Duration, usage string) *time.Duration {
	c.add(name)
	return c.fs.Duration(name, value, usage)
}

func (c *collectorFlags) Bool(name string, value bool, usage string) *bool {
	c.add(name)
	return c.fs.Bool(name, value, usage)
}

// args are the collect arguments of the flags whose value is not their
// type's zero value (a zero leaves the collectors' own default), in the
// order the flags were defined; a true boolean flag is passed bare.
func (c *collectorFlags) args() []string {
	var a []string
	for _, name := range c.names {
		f := c.fs.Lookup(name)
		v := f.Value.(flag.Getter).Get()
		if reflect.ValueOf(v).IsZero() {
			continue
		}
		if _, ok := v.(bool); ok {
			a = append(a, "--"+name)
			continue
		}
		s := f.Value.String()
		if abs := c.paths[name]; abs != nil {
			s = abs(s)
		}
		a = append(a, "--"+name, s)
	}
	return a
}
