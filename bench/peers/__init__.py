"""One module per system under test, all behind the small interface of ``base.Peer``."""
