package profile

// SpaceObjectID is the id of the pseudo data object that stands for all of
// a kernel's shared (space 2) or local (space 3) memory: those spaces have
// no allocation calls, so, as GVProf does, their accesses are attributed to
// one object per kernel context and space. Size is not part of the key
// (ObjectIDOf's size slot carries the space, with the top bit set so that
// no real allocation of that size collides).
func SpaceObjectID(kernel NodeID, space uint8) ObjectID {
	return ObjectIDOf(kernel, 1<<63|uint64(space))
}
