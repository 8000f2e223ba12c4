import Testing

/// The suites that run the whole constellation or flood a broker, one at a
/// time: on two cores, side by side they starved each other past their
/// deadlines (a 10 s command timeout, a 1 s answer the trust boundary promises).
/// The lighter end-to-end suites still run beside them.
@Suite(.serialized) enum HeavySuites {}
