// Package broker runs and reaches the NATS JetStream broker that carries a
// job's batches from the collectors to the reduction tree: an embedded
// nats-server with file storage for single-machine runs, or an existing
// cluster (URLs, credentials, TLS) at scale. It also names everything a job
// uses on the broker (subjects, stream, consumers, module bucket), so every
// stage agrees on the layout.
package broker

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxJobLen bounds a job name: it becomes part of subjects, the stream and
// bucket names and the server's store directories.
const MaxJobLen = 64

// ValidateJob checks that job can name subjects, streams and buckets: 1 to
// MaxJobLen characters from [A-Za-z0-9_-]. Subject tokens forbid '.', '*',
// '>' and white space, stream names also path separators; the narrower set
// keeps every derived name valid on every server. The error names the first
// offending character and its position.
func ValidateJob(job string) error {
	if job == "" {
		return fmt.Errorf("broker: job name is empty")
	}
	if len(job) > MaxJobLen {
		return fmt.Errorf("broker: job name %q has %d bytes, more than %d", job, len(job), MaxJobLen)
	}
	for i, c := range job {
		if !jobChar(c) {
			return fmt.Errorf("broker: job name %q: character %q at byte %d is not allowed (use A-Z a-z 0-9 _ -)", job, c, i)
		}
	}
	return nil
}

func jobChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// SanitizeJob turns any string into a valid job name: characters outside
// [A-Za-z0-9_-] become '_', an empty name becomes "job", and long names are
// cut to MaxJobLen.
func SanitizeJob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if jobChar(c) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" {
		out = "job"
	}
	if len(out) > MaxJobLen {
		out = out[:MaxJobLen]
	}
	return out
}

// SubjectPrefix is the first token of every gpuprof subject.
const SubjectPrefix = "gpuprof"

// JobSubjects is every subject of job.
func JobSubjects(job string) string { return SubjectPrefix + "." + job + ".>" }

// InputSubjects are the subjects of job's input stream (StreamName): the
// ranks' batches and done items, and the end signal.
func InputSubjects(job string) []string {
	p := SubjectPrefix + "." + job + "."
	return []string{p + "batch.*", p + "done.*", p + "end"}
}

// TreeSubjects are the subjects of job's tree stream (TreeStreamName):
// the nodes' partials, the final profile, and the end signal's copy.
func TreeSubjects(job string) []string {
	p := SubjectPrefix + "." + job + "."
	return []string{p + "partial.*.*", p + "final", p + "tree.end"}
}

// BatchSubject carries rank's data batches.
func BatchSubject(job string, rank int32) string {
	return SubjectPrefix + "." + job + ".batch." + strconv.Itoa(int(rank))
}

// DoneSubject carries rank's done item (its batch count and totals).
func DoneSubject(job string, rank int32) string {
	return SubjectPrefix + "." + job + ".done." + strconv.Itoa(int(rank))
}

// StatusSubject carries rank's collector status (running, analysing,
// interrupted, done) as plain NATS messages, not stored: heartbeats that
// let gpuprof run say why a rank is incomplete (docs/faults.md).
func StatusSubject(job string, rank int32) string {
	return SubjectPrefix + "." + job + ".status." + strconv.Itoa(int(rank))
}

// StatusSubjects matches every rank's status subject of job.
func StatusSubjects(job string) string { return SubjectPrefix + "." + job + ".status.*" }

// PartialSubject carries the cumulative partials of tree node (level, node).
func PartialSubject(job string, level, node int) string {
	return SubjectPrefix + "." + job + ".partial." + strconv.Itoa(level) + "." + strconv.Itoa(node)
}

// FinalSubject carries the root's whole-job profile.
func FinalSubject(job string) string { return SubjectPrefix + "." + job + ".final" }

// EndSubject carries the launcher's "the application has ended" signal,
// which starts the reducers' rank-timeout clocks, in the input stream;
// TreeEndSubject carries the same signal in the tree stream, for inner
// nodes (a consumer reads one stream).
func EndSubject(job string) string     { return SubjectPrefix + "." + job + ".end" }
func TreeEndSubject(job string) string { return SubjectPrefix + "." + job + ".tree.end" }

// StreamName is job's input stream: what the collectors publish. The
// reducers' partials and the final profile are in a stream of their own
// (TreeStreamName), so a full input stream never refuses the partial whose
// storage lets a leaf purge the inputs it merged.
func StreamName(job string) string { return "GPUPROF_" + job }

// TreeStreamName is job's tree stream (partials and the final profile).
func TreeStreamName(job string) string { return "GPUPROFTREE_" + job } // never an input stream's name

// ModuleBucket is the object-store bucket of job's GPU modules.
func ModuleBucket(job string) string { return "GPUPROF_MOD_" + job }

// SubjectKind tells the gpuprof subjects apart.
type SubjectKind int

const (
	SubjectUnknown SubjectKind = iota
	SubjectBatch
	SubjectDone
	SubjectPartial
	SubjectFinal
	SubjectEnd
	SubjectStatus
)

// Subject is a parsed gpuprof subject.
type Subject struct {
	Kind  SubjectKind
	Job   string
	Rank  int32 // batch, done
	Level int   // partial
	Node  int   // partial
}

// ParseSubject reads a gpuprof subject; it returns an error naming the
// subject if it is not one of the layout's.
func ParseSubject(subj string) (Subject, error) {
	t := strings.Split(subj, ".")
	bad := func(why string) (Subject, error) {
		return Subject{}, fmt.Errorf("broker: subject %q: %s", subj, why)
	}
	if len(t) < 3 || t[0] != SubjectPrefix {
		return bad("not a gpuprof subject")
	}
	s := Subject{Job: t[1]}
	num := func(tok string, bits int) (int64, bool) {
		v, err := strconv.ParseInt(tok, 10, bits)
		return v, err == nil && v >= 0
	}
	switch {
	case (t[2] == "batch" || t[2] == "done" || t[2] == "status") && len(t) == 4:
		r, ok := num(t[3], 32)
		if !ok {
			return bad("rank token is not a rank")
		}
		s.Kind, s.Rank = SubjectBatch, int32(r)
		switch t[2] {
		case "done":
			s.Kind = SubjectDone
		case "status":
			s.Kind = SubjectStatus
		}
	case t[2] == "partial" && len(t) == 5:
		l, ok1 := num(t[3], 16)
		n, ok2 := num(t[4], 32)
		if !ok1 || !ok2 {
			return bad("level or node token is not a number")
		}
		s.Kind, s.Level, s.Node = SubjectPartial, int(l), int(n)
	case t[2] == "final" && len(t) == 3:
		s.Kind = SubjectFinal
	case t[2] == "end" && len(t) == 3, t[2] == "tree" && len(t) == 4 && t[3] == "end":
		s.Kind = SubjectEnd
	default:
		return bad("unknown kind")
	}
	return s, nil
}
