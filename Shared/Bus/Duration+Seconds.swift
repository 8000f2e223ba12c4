extension Duration {
    /// This duration in seconds, for the APIs that take a `Double`.
    public var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// This duration in whole milliseconds.
    public var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
