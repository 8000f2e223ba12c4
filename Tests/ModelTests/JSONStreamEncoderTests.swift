import Foundation
import Model
import Testing

/// `JSONStreamEncoder` writes what JSONEncoder writes, as JSON values (its
/// keys come in field order, not sorted), and refuses what it cannot write
/// rather than writing broken JSON.
@Suite struct JSONStreamEncoderTests {
    enum Phase: Codable, Equatable {
        case idle
        case tracking(filter: Inner, since: Int64)
        case lost(Inner)
    }

    enum Kind: String, Codable, Equatable { case a, b }

    struct Inner: Codable, Equatable {
        var x: Double
        var ys: [Double]
        var label: String?
    }

    struct Outer: Codable, Equatable {
        var name: String
        var count: Int
        var small: Int8
        var big: UInt64
        var flag: Bool
        var ratio: Float
        var inner: Inner
        var inners: [Inner]
        var grid: [[Double]]
        var optionals: [Int?]
        var byName: [String: Inner]
        var byNumber: [Int: String]
        var phase: Phase
        var phases: [Phase]
        var kind: Kind
        var nothing: Inner?
        var empty: Empty
        var set: Set<Int64>
    }

    struct Empty: Codable, Equatable {}

    static let sample = Outer(
        name: "van \"7\" \\ ☃\n\t\u{01}", count: -42, small: -8, big: 1 << 52, flag: true, ratio: 0.1,
        inner: Inner(x: 0.1, ys: [1, -0.0, 1e-7, 1.25e-300, 123_456_789.125, 9e15, -2.5e-308], label: nil),
        inners: [Inner(x: 2, ys: [], label: "l"), Inner(x: 3.5, ys: [4], label: "")],
        grid: [[], [1, 2], [3]], optionals: [1, nil, 3],
        byName: ["a": Inner(x: 1, ys: [2], label: "z"), "b/c": Inner(x: 0, ys: [], label: nil)], byNumber: [3: "three", -1: "minus"],
        phase: .tracking(filter: Inner(x: 1, ys: [2, 3], label: nil), since: 1_793_197_938_549),
        phases: [.idle, .lost(Inner(x: 9, ys: [], label: "x")), .tracking(filter: Inner(x: 0, ys: [0], label: nil), since: 0)],
        kind: .b, nothing: nil, empty: Empty(), set: [1, 5, 9])

    func json(_ bytes: [UInt8]) throws -> JSONValue { try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) }

    @Test func writesWhatJSONEncoderWrites() throws {
        let streamed = try JSONStreamEncoder.encode(Self.sample)
        #expect(try json(streamed) == json(Array(try JSONEncoder().encode(Self.sample))))
        #expect(try JSONDecoder().decode(Outer.self, from: Data(streamed)) == Self.sample)
    }

    @Test func topLevelValuesOfEveryShape() throws {
        #expect(String(decoding: try JSONStreamEncoder.encode(5), as: UTF8.self) == "5")
        #expect(String(decoding: try JSONStreamEncoder.encode("a\"b"), as: UTF8.self) == #""a\"b""#)
        #expect(String(decoding: try JSONStreamEncoder.encode([Int?.none]), as: UTF8.self) == "[null]")
        #expect(String(decoding: try JSONStreamEncoder.encode(Empty()), as: UTF8.self) == "{}")
        #expect(String(decoding: try JSONStreamEncoder.encode([[Int]]()), as: UTF8.self) == "[]")
        #expect(String(decoding: try JSONStreamEncoder.encode(Kind.a), as: UTF8.self) == #""a""#)
    }

    @Test func refusesWhatJSONEncoderRefuses() {
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode(Inner(x: .nan, ys: [], label: nil)) }
        #expect(throws: EncodingError.self) { try JSONStreamEncoder.encode([Double.infinity]) }
    }

    /// Writes that do not nest (back to an outer container, then to an inner
    /// one again), super encoders and Foundation's own types are refused; the
    /// stored form then goes through JSONEncoder and still reads back.
    struct Interleaved: Encodable {
        enum K: String, CodingKey { case a, b, c }
        func encode(to encoder: any Encoder) throws {
            var outer = encoder.container(keyedBy: K.self)
            var inner = outer.nestedContainer(keyedBy: K.self, forKey: .a)
            try inner.encode(1, forKey: .a)
            try outer.encode(2, forKey: .b)
            try inner.encode(3, forKey: .c)
        }
    }

    struct TwoValues: Encodable {
        func encode(to encoder: any Encoder) throws {
            var one = encoder.singleValueContainer()
            try one.encode(1)
            try one.encode(2)
        }
    }

    struct WithSuper: Encodable {
        enum K: String, CodingKey { case a }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: K.self)
            try c.encode(1, forKey: .a)
            var s = c.superEncoder().singleValueContainer()
            try s.encode(2)
        }
    }

    struct Stamped: Codable, Equatable { var at: Date; var blob: Data }

    @Test func refusesWritesThatDoNotNest() throws {
        #expect(throws: JSONStreamEncoder.Unsupported.self) { try JSONStreamEncoder.encode(Interleaved()) }
        #expect(throws: JSONStreamEncoder.Unsupported.self) { try JSONStreamEncoder.encode(TwoValues()) }
        #expect(throws: JSONStreamEncoder.Unsupported.self) { try JSONStreamEncoder.encode(WithSuper()) }
        let stamped = Stamped(at: Date(timeIntervalSince1970: 1_793_197_938), blob: Data([1, 2, 3]))
        #expect(throws: JSONStreamEncoder.Unsupported.self) { try JSONStreamEncoder.encode(stamped) }
        #expect(try JSONDecoder().decode(Stamped.self, from: Data(JSONCoding.stored(stamped))) == stamped)
        #expect(try json(JSONCoding.stored(Interleaved())) == json(Array(try JSONEncoder().encode(Interleaved()))))
    }
}
