import Foundation

/// What an exchange with the customer's endpoint came to: a status when a
/// server answered, otherwise why none did (timeout, refused, …).
public struct Exchange: Sendable, Equatable {
    public var statusCode: Int?
    /// The `Retry-After` header, as sent.
    public var retryAfter: String?
    public var failure: String?

    public init(statusCode: Int? = nil, retryAfter: String? = nil, failure: String? = nil) {
        self.statusCode = statusCode; self.retryAfter = retryAfter; self.failure = failure
    }
}

/// What to do with the batch after an exchange.
public enum Verdict: Sendable, Equatable {
    /// Delivered: delete it.
    case delivered
    /// Keep it and try again after `afterMs`.
    case retry(afterMs: Int64, reason: String)
    /// The credentials were refused: stop sending, keep everything, wait for new ones.
    case authExpired
    /// A 4xx that retrying cannot fix: set this batch aside so the rest flows.
    case parked(reason: String)
}

/// Exponential backoff with jitter, and the HTTP rules that pick a verdict.
public struct DeliveryRules: Sendable {
    public var baseDelayMs: Int64
    public var maxDelayMs: Int64
    /// The longest `Retry-After` honoured (a server asking for a day gets an hour).
    public var maxRetryAfterMs: Int64 = 3_600_000

    public init(baseDelayMs: Int64, maxDelayMs: Int64) { self.baseDelayMs = baseDelayMs; self.maxDelayMs = maxDelayMs }
    public init(_ config: SyncConfig) {
        self.init(baseDelayMs: Int64(config.retryBaseDelaySec * 1000), maxDelayMs: Int64(config.retryMaxDelaySec * 1000))
    }

    /// The wait before attempt `attempt + 1` (attempt 0 failed first): base·2ⁿ
    /// capped at the maximum, then spread over its upper half by `jitter` in
    /// 0…1, so a fleet of uploaders that failed together does not retry together.
    public func backoff(attempt: Int, jitter: Double) -> Int64 {
        let exponential = Double(baseDelayMs) * pow(2, Double(min(attempt, 40)))
        let capped = min(Double(maxDelayMs), exponential)
        return Int64(capped * (0.5 + 0.5 * min(1, max(0, jitter))))
    }

    public func verdict(_ exchange: Exchange, attempt: Int, jitter: Double, nowMs: Int64) -> Verdict {
        guard let status = exchange.statusCode else {
            return .retry(afterMs: backoff(attempt: attempt, jitter: jitter), reason: exchange.failure ?? "no answer")
        }
        switch status {
        case 200..<300:
            return .delivered
        case 401:
            return .authExpired
        case 429, 503:
            if let asked = exchange.retryAfter.flatMap({ Self.retryAfterMs($0, nowMs: nowMs) }) {
                return .retry(afterMs: min(maxRetryAfterMs, asked), reason: "HTTP \(status), Retry-After \(exchange.retryAfter!)")
            }
            return .retry(afterMs: backoff(attempt: attempt, jitter: jitter), reason: "HTTP \(status)")
        case 408, 425, 500..<600:
            return .retry(afterMs: backoff(attempt: attempt, jitter: jitter), reason: "HTTP \(status)")
        default:
            return .parked(reason: "HTTP \(status): the server refused this batch; retrying cannot fix it")
        }
    }

    /// `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
    public static func retryAfterMs(_ value: String, nowMs: Int64) -> Int64? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(text), seconds >= 0 { return seconds * 1000 }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = formatter.date(from: text) else { return nil }
        return max(0, Int64(date.timeIntervalSince1970 * 1000) - nowMs)
    }
}
