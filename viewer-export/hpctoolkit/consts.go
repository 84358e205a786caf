// Package hpctoolkit writes gpuprof profiles as HPCToolkit databases
// (meta.db, profile.db, cct.db, format v4.0) that hpcviewer opens, and
// reads such databases back (ours and HPCToolkit's own).
package hpctoolkit

// Lexical types of a context (meta.db context tree).
const (
	LexFunction    = 0
	LexLoop        = 1
	LexLine        = 2
	LexInstruction = 3
)

// Relations of a context to its parent.
const (
	RelLexical = 0
	RelCall    = 1
	RelInlined = 2
)

// Scope types of the metrics section.
const (
	ScopeCustom     = 0
	ScopePoint      = 1
	ScopeExecution  = 2
	ScopeTransitive = 3
)
