import FoundationEssentials
import Glibc

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
        let text = value.trimmingSpaces()
        if let seconds = Int64(text), seconds >= 0 { return seconds * 1000 }
        guard let dateMs = imfFixdateMs(text) else { return nil }
        return max(0, dateMs - nowMs)
    }

    /// An IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT` (RFC 9110 §5.6.7),
    /// in ms since 1970; nil for anything else, or a day its month lacks.
    public static func imfFixdateMs(_ text: String) -> Int64? {
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        let weekdays = ["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"]
        /// Exactly `count` ASCII digits (Int() alone would take a sign).
        func number(_ text: Substring, digits count: Int) -> Int? {
            text.utf8.count == count && text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) ? Int(text) : nil
        }
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, weekdays.contains(String(parts[0])), parts[5] == "GMT",
              let day = number(parts[1], digits: 2), let month = months.firstIndex(of: String(parts[2])),
              let year = number(parts[3], digits: 4) else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, let hour = number(clock[0], digits: 2), let minute = number(clock[1], digits: 2),
              let second = number(clock[2], digits: 2),
              (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second) else { return nil }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let monthDays = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month]
        guard (1...monthDays).contains(day) else { return nil }
        // Days since 1970 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
        let m = month + 1
        let y = m <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return (Int64(days) * 86_400 + Int64(hour * 3_600 + minute * 60 + second)) * 1_000
    }
}
