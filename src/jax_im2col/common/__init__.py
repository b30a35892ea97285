"""What every op family shares: geometry, argument checks, settings, device
capabilities, the FFI modules, primitive helpers."""
