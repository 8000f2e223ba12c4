import Runtime

extension ServiceHost {
    /// Runs the host's parts (the query worker, the service's worker) as the
    /// process's `Lifecycle` would, for a test that drives the host itself;
    /// `close()` stops them.
    @discardableResult
    public func runningParts() -> ServiceHost {
        for part in parts { Task(executorPreference: part.executor) { try await part.service.run() } }
        return self
    }
}
