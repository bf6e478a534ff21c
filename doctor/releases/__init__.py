"""Overlay stacks (`run --with PKG==VER`): named releases installed beside the user's environment, run against it."""
