import FoundationEssentials

/// Wall-clock milliseconds, injectable so tests decide what "now" is.
public protocol WallClock: Sendable {
    func nowMs() -> Int64
}

public struct SystemWallClock: WallClock {
    public init() {}
    public func nowMs() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
}
