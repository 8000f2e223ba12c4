import Foundation
import Model
import Testing
import UploaderCore

@Suite struct SyncConfigTests {
    @Test func onlyTheURLIsRequiredAndAnOlderFileDecodes() throws {
        let config = try JSONDecoder().decode(SyncConfig.self, from: Data(#"{"url":"https://api.example.com/points"}"#.utf8)).validated()
        #expect(config.batchSize == 200 && config.autoSync && !config.stopTrackingOnAuthExpiry && config.format == .json)
        #expect(config.coalesceMs == 250)
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(SyncConfig.self, from: Data("{}".utf8)) }
    }

    @Test func badSettingsAreRefusedByName() throws {
        for (json, setting) in [
            (#"{"url":"ftp://x.example"}"#, "url"), (#"{"url":"not a url"}"#, "url"),
            (#"{"url":"https://x.example","batchSize":0}"#, "batchSize"),
            (#"{"url":"https://x.example","retryBaseDelaySec":10,"retryMaxDelaySec":5}"#, "retryMaxDelaySec"),
            (#"{"url":"https://x.example","headers":{"Bad Name":"x"}}"#, "headers"),
            (#"{"url":"https://x.example","httpTimeoutMs":5}"#, "httpTimeoutMs"),
            (#"{"url":"https://x.example","coalesceMs":-1}"#, "coalesceMs"),
            (#"{"url":"https://x.example","coalesceMs":60001}"#, "coalesceMs"),
        ] {
            let config = try JSONDecoder().decode(SyncConfig.self, from: Data(json.utf8))
            #expect(throws: SyncConfigError.self, "\(json)") { try config.validated() }
            do { _ = try config.validated() } catch let error as SyncConfigError { #expect(error.setting == setting, "\(json): \(error)") }
        }
    }

    @Test func secretsNeverShow() {
        var config = SyncConfig(url: "https://user:hunter2@api.example.com/p")
        config.headers = ["Authorization": "Bearer s3cret"]
        let shown = String(decoding: try! JSONEncoder().encode(config.masked), as: UTF8.self)
        #expect(!shown.contains("s3cret") && !shown.contains("hunter2"), "\(shown)")
        #expect(shown.contains("Authorization"))
    }
}

@Suite struct DeliveryRulesTests {
    let rules = DeliveryRules(baseDelayMs: 1_000, maxDelayMs: 60_000)

    @Test func backoffDoublesWithJitterUpToTheCap() {
        #expect(rules.backoff(attempt: 0, jitter: 1) == 1_000 && rules.backoff(attempt: 0, jitter: 0) == 500)
        #expect(rules.backoff(attempt: 3, jitter: 1) == 8_000)
        #expect(rules.backoff(attempt: 30, jitter: 1) == 60_000 && rules.backoff(attempt: 30, jitter: 0) == 30_000)
    }

    @Test func everyAnswerHasItsVerdict() {
        func verdict(_ status: Int?, retryAfter: String? = nil) -> Verdict {
            rules.verdict(Exchange(statusCode: status, retryAfter: retryAfter, failure: status == nil ? "connection refused" : nil),
                          attempt: 2, jitter: 1, nowMs: 1_800_000_000_000)
        }
        #expect(verdict(200) == .delivered && verdict(204) == .delivered)
        #expect(verdict(401) == .authExpired)
        #expect(verdict(500) == .retry(afterMs: 4_000, reason: "HTTP 500"))
        #expect(verdict(nil) == .retry(afterMs: 4_000, reason: "connection refused"))
        #expect(verdict(429, retryAfter: "120") == .retry(afterMs: 120_000, reason: "HTTP 429, Retry-After 120"))
        #expect(verdict(503, retryAfter: "Fri, 15 Jan 2027 08:00:30 GMT").retryAfterMs.map { $0 > 0 } == true)
        #expect(verdict(429, retryAfter: "86400") == .retry(afterMs: 3_600_000, reason: "HTTP 429, Retry-After 86400"))
        #expect(verdict(503) == .retry(afterMs: 4_000, reason: "HTTP 503"))
        if case .parked = verdict(400) {} else { Issue.record("400 must park the batch") }
        if case .parked = verdict(422) {} else { Issue.record("422 must park the batch") }
    }

    @Test func retryAfterReadsSecondsAndDates() {
        let now: Int64 = 1_800_000_000_000  // 2027-01-15T08:00:00Z
        #expect(DeliveryRules.retryAfterMs("30", nowMs: now) == 30_000)
        #expect(DeliveryRules.retryAfterMs("Fri, 15 Jan 2027 08:00:30 GMT", nowMs: now) == 30_000)
        #expect(DeliveryRules.retryAfterMs("soon", nowMs: now) == nil)
    }

    /// The HTTP-date a Retry-After may carry, read without a date formatter:
    /// the epoch, a leap day, a day the month lacks, and forms that are not IMF-fixdate.
    @Test func anHTTPDateIsReadExactly() {
        #expect(DeliveryRules.imfFixdateMs("Thu, 01 Jan 1970 00:00:00 GMT") == 0)
        #expect(DeliveryRules.imfFixdateMs("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777_000)
        #expect(DeliveryRules.imfFixdateMs("Tue, 29 Feb 2028 23:59:60 GMT") == 1_835_481_600_000)
        #expect(DeliveryRules.imfFixdateMs("Fri, 01 Mar 2100 00:00:00 GMT") == 4_107_542_400_000)
        for text in ["Mon, 29 Feb 2027 00:00:00 GMT", "Sun, 31 Apr 2027 00:00:00 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                     "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 6 Nov 1994 08:49:37 GMT",
                     "Sun, 06 nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 8:49:37 GMT", "Sun, +6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 +8:49:37 GMT", ""] {
            #expect(DeliveryRules.imfFixdateMs(text) == nil, "\(text)")
        }
    }
}

extension Verdict {
    var retryAfterMs: Int64? { if case .retry(let ms, _) = self { ms } else { nil } }
}

@Suite struct RequestTests {
    let van = DeviceID("van1")!

    func queued(_ seq: Int64, device: DeviceID? = nil) -> QueuedPoint {
        QueuedPoint(device: device ?? van, point: TrackPoint(seq: seq, sessionID: "s", timeMs: 1_800_000_000_000 + seq * 1000,
                                                             latitude: 48.1, longitude: 11.5, accuracyM: 5, speedMps: 10, courseDeg: 90, odometerM: 0))
    }

    @Test func aJSONBatchNamesEveryPointByDeviceAndSeq() throws {
        var config = SyncConfig(url: "https://api.example.com/points")
        config.headers = ["Authorization": "Bearer x"]
        let requests = Requests.make([queued(1), queued(2)], key: "batch-1", config: config)
        #expect(requests.count == 1)
        let request = requests[0]
        #expect(request.method == "POST" && request.headers["Authorization"] == "Bearer x" && request.headers["Content-Type"] == "application/json")
        #expect(request.headers["Idempotency-Key"] == "batch-1")
        let body = try #require(try JSONSerialization.jsonObject(with: Data(request.body ?? [])) as? [String: Any])
        #expect(body["device"] as? String == "van1")
        let points = try #require(body["points"] as? [[String: Any]])
        #expect(points.map { $0["seq"] as? Int } == [1, 2] && points.allSatisfy { $0["device"] as? String == "van1" })
        // Mixed devices: no batch-level device, every point still says whose it is.
        let mixed = Requests.make([queued(1), queued(1, device: DeviceID("van2")!)], key: "batch-2", config: config)[0]
        let mixedBody = try #require(try JSONSerialization.jsonObject(with: Data(mixed.body ?? [])) as? [String: Any])
        #expect(mixedBody["device"] == nil)
    }

    /// Header names are case-insensitive: the request's own replace a
    /// configured spelling, and a configuration naming one header twice is refused.
    @Test func aHeaderGoesOutOnceWhateverItsSpelling() throws {
        var config = SyncConfig(url: "https://api.example.com/points")
        config.headers = ["content-type": "text/plain", "IDEMPOTENCY-KEY": "mine", "X-Tenant": "t1"]
        let request = Requests.make([queued(1)], key: "batch-1", config: config)[0]
        #expect(request.headers == ["Content-Type": "application/json", "Idempotency-Key": "batch-1", "X-Tenant": "t1"])
        config.headers = ["X-Tenant": "t1", "x-tenant": "t2"]
        #expect { try config.validated() } throws: { ($0 as? SyncConfigError)?.problem == "'X-Tenant' and 'x-tenant' are the same header" }
    }

    @Test func osmandIsOneRequestPerPointWithItsFieldsInTheQuery() throws {
        var config = SyncConfig(url: "http://traccar.example:5055/")
        config.format = .osmand
        let requests = Requests.make([queued(1), queued(2)], key: "unused", config: config)
        #expect(requests.count == 2)
        let items = try #require(URLComponents(string: requests[0].url)?.queryItems)
        let fields = Dictionary(uniqueKeysWithValues: items.map { ($0.name, $0.value ?? "") })
        // Milliseconds: Traccar's decoder reads a timestamp past 2^31 as ms.
        #expect(fields["id"] == "van1" && fields["timestamp"] == "1800000001000" && fields["lat"] == "48.1000000")
        #expect(fields["speed"].flatMap(Double.init).map { abs($0 - 19.44) < 0.01 } == true)  // knots
        #expect(fields["bearing"] == "90.0" && fields["accuracy"] == "5.0")
        // Nothing the phone did not say.
        #expect(fields["altitude"] == nil && fields["batt"] == nil)
        #expect(requests[0].headers["Idempotency-Key"] == "van1::1")
    }

    @Test func forwardingKeepsWhatThePhoneSaid() throws {
        var point = queued(7, device: DeviceID("van-1")!)
        point.epoch = "e-1"
        point.altitudeM = 512.25
        point.batteryPct = 81
        var config = SyncConfig(url: "http://traccar.example:5055/")
        config.format = .osmand
        let request = Requests.make([point], key: "unused", config: config)[0]
        let items = try #require(URLComponents(string: request.url)?.queryItems)
        let fields = Dictionary(uniqueKeysWithValues: items.map { ($0.name, $0.value ?? "") })
        #expect(fields["altitude"] == "512.2" || fields["altitude"] == "512.3")
        #expect(fields["batt"] == "81" && fields["timestamp"] == "1800000007000")
        // A device id with dashes cannot make two points' keys alike.
        #expect(request.headers["Idempotency-Key"] == "van-1:e-1:7")
        config.format = .json
        let json = Requests.make([point], key: "batch-9", config: config)[0]
        let body = try #require(try JSONSerialization.jsonObject(with: Data(json.body ?? [])) as? [String: Any])
        let first = try #require((body["points"] as? [[String: Any]])?.first)
        #expect(first["altitudeM"] as? Double == 512.25 && first["batteryPct"] as? Double == 81 && first["timeMs"] as? Int == 1_800_000_007_000)
    }
}
