import Foundation
import Model

/// One HTTP request as tracker-http sees it, once libmicrohttpd has parsed it.
public struct HTTPRequest: Sendable {
    public var method: String
    /// The path without its query, percent-decoded by libmicrohttpd.
    public var path: String
    /// Query arguments (the first of each name).
    public var query: [String: String]
    /// Header names lowercased.
    public var headers: [String: String]
    public var body: [UInt8]
    public var clientAddress: String

    public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = [],
                clientAddress: String = "") {
        self.method = method; self.path = path; self.query = query; self.headers = headers; self.body = body
        self.clientAddress = clientAddress
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The query's arguments, or a form body's when the query has none (Traccar's OsmAnd decoder reads both).
    public var parameters: [String: String] {
        if !query.isEmpty { return query }
        let type = header("content-type")?.lowercased() ?? ""
        guard type.hasPrefix("application/x-www-form-urlencoded") || (type.isEmpty && !body.isEmpty) else { return [:] }
        return FormParameters.parse(String(decoding: body, as: UTF8.self))
    }
}

/// What a handler answers: a status, headers and a body (or a stream of events).
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Server-Sent Events: the body comes from here until it ends.
    public var stream: (any EventSource)?

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = [], stream: (any EventSource)? = nil) {
        self.status = status; self.headers = headers; self.body = body; self.stream = stream
    }

    public static func json(_ status: Int = 200, bytes: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: bytes)
    }

    public static func json(_ status: Int = 200, _ value: some Encodable) -> HTTPResponse {
        json(status, bytes: JSONCoding.bytes(value))
    }

    public static func text(_ status: Int = 200, contentType: String, _ text: String) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)], body: Array(text.utf8))
    }

    public static let empty = HTTPResponse(status: 200)
}

/// A body produced piece by piece (Server-Sent Events). `next` blocks its
/// connection's thread until there is something to send; nil ends the stream.
public protocol EventSource: Sendable {
    func next() -> [UInt8]?
    /// The client went away or the server stops: release what the stream holds.
    func close()
}

/// An answer that is not a success: its status and the contract's `{code, message}`.
public struct HTTPError: Error, Equatable, Sendable {
    public var status: Int
    public var code: ErrorCode
    public var message: String
    public init(_ status: Int, _ code: ErrorCode, _ message: String) { self.status = status; self.code = code; self.message = message }

    public static func badInput(_ message: String) -> HTTPError { HTTPError(400, .badInput, message) }
    public static func notFound(_ message: String) -> HTTPError { HTTPError(404, .notFound, message) }
    public static func forbidden(_ message: String) -> HTTPError { HTTPError(403, .forbidden, message) }
    public static let unauthorized = HTTPError(401, .unauthorized, "credentials needed: HTTP Basic with a broker account, or a device's ingest token as id")

    /// The HTTP status of a command's failure code.
    public static func status(of code: ErrorCode) -> Int {
        switch code {
        case .badInput, .invalidConfig: 400
        case .unauthorized: 401
        case .forbidden: 403
        case .notFound: 404
        case .conflict: 409
        case .limitReached: 429
        case .busy, .notReady: 503
        case .timeout: 504
        case .internal: 500
        }
    }

    public var response: HTTPResponse {
        var response = HTTPResponse.json(status, ["code": code.rawValue, "message": message])
        if status == 401 { response.headers.append(("WWW-Authenticate", #"Basic realm="tracker", charset="UTF-8""#)) }
        if status == 429 || status == 503 { response.headers.append(("Retry-After", "1")) }
        return response
    }
}

/// `a=1&b=two%20words&c=x+y`, as forms and query strings write it.
public enum FormParameters {
    public static func parse(_ text: String) -> [String: String] {
        var result: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String? { String(s).replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let name = decode(parts[0]), !name.isEmpty else { continue }
            let value = parts.count > 1 ? decode(parts[1]) ?? String(parts[1]) : ""
            if result[name] == nil { result[name] = value }
        }
        return result
    }
}
