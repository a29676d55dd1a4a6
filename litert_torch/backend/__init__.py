"""Module paths of the official litert-torch's backend that code written for it imports (see lowerings)."""
