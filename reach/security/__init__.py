"""Security: the primitives (:mod:`~reach.security.keys`: keyrings, signatures, AES-GCM), the
guard that applies them in one process (:mod:`~reach.security.guard`: the deployment's settings,
the ACL, signed registry calls), and the buffered audit trail (:mod:`~reach.security.trail`)."""
