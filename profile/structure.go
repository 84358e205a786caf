package profile

// StructureMissingPrefix names the metrics that mark, on a kernel node, a
// GPU function whose instructions the collector placed without their SASS
// structure (directly under the function, without loops or lines):
// StructureMissingPrefix + reason, 1 per rank, kernel context and
// function. The reasons are the collector's (collector/online,
// "WhyNoCubin" and the others).
const StructureMissingPrefix = "structure.missing."
