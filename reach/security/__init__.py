"""Security: the primitives (:mod:`~reach.security.keys`: keyrings, signatures, AES-GCM) and the
guard that applies them in one process (:mod:`~reach.security.guard`: the deployment's settings,
the ACL, signed registry calls). The buffered audit trail, which writes through the audit port,
is runtime: :mod:`reach._runtime.trail`."""
