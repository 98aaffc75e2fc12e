"""What the outward-facing features share: the gateway's settings and its bearer tokens."""
