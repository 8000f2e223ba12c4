import Synchronization

/// A value behind a lock, shared by reference (a `Mutex` cannot be captured).
final class Locked<Value>: @unchecked Sendable {
    private let mutex: Mutex<Value>
    init(_ value: sending Value) { mutex = Mutex(value) }
    func withLock<T>(_ body: (inout sending Value) throws -> sending T) rethrows -> sending T { try mutex.withLock(body) }
}
