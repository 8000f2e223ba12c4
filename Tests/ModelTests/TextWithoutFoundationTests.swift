import Foundation
import Model
import TestSupport
import Testing

/// The services do without libFoundation, so Model carries its own JSON
/// syntax check and number text. What the services decode with (JSONDecoder)
/// and Foundation, which the tests still load, are the references.
@Suite struct TextWithoutFoundationTests {
    static let validDocuments = [
        #"{"a": [1, -2.5e3, 0, 0.25, true, false, null], "b": {"c": "d\n\u00e9\"\\\/"}, "e": []}"#,
        #"  [ ]  "#, #""just a string""#, "42", "-0.0e-0", "{}", #"{"": {"": [[[]]]}}"#,
        "{\n  \"logLevel\": \"info\",\n  \"mqttPort\": 1883\n}\n",
        #"{"name": "Zürich → 東京 🚚", "pair": "\ud83d\ude9a", "bmp": "\u00e9\uFFFD"}"#,
    ]

    /// The settings loader asks where a file breaks only once JSONDecoder
    /// refused it, so the two must agree on what is valid. Two of the
    /// decoder's own ways are left out: it takes a trailing comma, and
    /// refuses a zero with an exponent (`-0.0e-3`).
    @Test func agreesWithTheDecoderOnValidAndBrokenText() throws {
        let trailingComma = try Regex(#",[ \t\n]*[\]}]"#)
        let zeroWithExponent = try Regex(#"(^|[^0-9.])-?0(\.0*)?[eE]"#)
        var random = SeededRandom(seed: 7)
        // Structure, numbers, escapes and surrogates' hex digits, and bytes that break UTF-8.
        let pieces = Array(#"{}[]:,"\ 0123456789.eE+-tfnulbdD"#.utf8) + [0x0A, 0x09, 0x01, UInt8(ascii: "x"), 0xFF, 0xC3, 0xED, 0xA0, 0x80, 0xF4]
        var broken = 0, checked = 0
        for document in Self.validDocuments {
            #expect(JSONSyntax.firstProblem(in: Array(document.utf8)) == nil, "\(document)")
            for _ in 0..<400 {
                var bytes = Array(document.utf8)
                // One to three edits: a byte replaced, inserted or removed.
                for _ in 0..<Int.random(in: 1...3, using: &random) where !bytes.isEmpty {
                    let at = Int.random(in: 0..<bytes.count, using: &random)
                    switch Int.random(in: 0..<3, using: &random) {
                    case 0: bytes[at] = pieces.randomElement(using: &random)!
                    case 1: bytes.insert(pieces.randomElement(using: &random)!, at: at)
                    default: bytes.remove(at: at)
                    }
                }
                let text = String(decoding: bytes, as: UTF8.self)
                guard !text.contains(trailingComma), !text.contains(zeroWithExponent) else { continue }
                let decoded = (try? JSONCoding.decoder.decode(AnyJSON.self, from: Data(bytes))) != nil
                let ours = JSONSyntax.firstProblem(in: bytes)
                #expect((ours == nil) == decoded, "\(text): ours \(String(describing: ours))")
                if let ours { broken += 1; #expect(ours.offset <= bytes.count) }
                checked += 1
            }
        }
        #expect(checked > 3_000)
        #expect(broken > 1_000)
    }

    @Test func saysWhereAndWhatBreaks() {
        func problem(_ text: String) -> JSONSyntax.Problem? { JSONSyntax.firstProblem(in: Array(text.utf8)) }
        #expect(problem(#"{"a": 1,,}"#) == .init(offset: 8, message: "expected a quoted key"))
        #expect(problem(#"{"a" 1}"#) == .init(offset: 5, message: "expected ':' after the key"))
        #expect(problem(#"[1 2]"#) == .init(offset: 3, message: "expected ',' or ']'"))
        #expect(problem(#"{"a": tru}"#) == .init(offset: 9, message: "invalid value"))
        #expect(problem(#"{"a": "b"#) == .init(offset: 8, message: "unterminated string"))
        #expect(problem("[1e400]") == .init(offset: 1, message: "number out of range"))
        #expect(problem("[01]") == .init(offset: 2, message: "expected ',' or ']'"))
        #expect(problem("{} x") == .init(offset: 3, message: "unexpected text after the value"))
        #expect(problem("") == .init(offset: 0, message: "unexpected end of file"))
        #expect(problem(String(repeating: "[", count: 600) + String(repeating: "]", count: 600))?.message == "nested too deeply")
        #expect(problem(String(repeating: "[", count: 500) + String(repeating: "]", count: 500)) == nil)
        #expect(JSONSyntax.firstProblem(in: [0xEF, 0xBB, 0xBF] + Array("{}".utf8)) == nil)
        #expect(JSONSyntax.firstProblem(in: [0xEF, 0xBB, 0xBF] + Array("{,}".utf8)) == .init(offset: 4, message: "expected a quoted key"))
        #expect(problem(#"["\ud800"]"#) == .init(offset: 2, message: "a high surrogate without its low one"))
        #expect(problem(#"["\udc00\ud800"]"#) == .init(offset: 2, message: "a lone low surrogate"))
        #expect(problem(#"["\ud800\u0041"]"#) == .init(offset: 2, message: "a high surrogate without its low one"))
        #expect(JSONSyntax.firstProblem(in: Array(#"["a"#.utf8) + [0xC3] + Array(#""]"#.utf8)) == .init(offset: 3, message: "invalid UTF-8"))
        #expect(JSONSyntax.firstProblem(in: Array(#"[""#.utf8) + [0xED, 0xA0, 0x80] + Array(#""]"#.utf8)) == .init(offset: 2, message: "invalid UTF-8"))
    }

    @Test func fixedPointTextIsPrintfs() {
        var random = SeededRandom(seed: 11)
        var values: [Double] = [0, -0.0, 0.5, 1.5, 2.5, -2.5, 0.125, 1e-9, 123_456.789, -98.765_43, 1e21, .greatestFiniteMagnitude, .infinity, -.infinity]
        for _ in 0..<500 { values.append(Double.random(in: -1e6...1e6, using: &random)) }
        for value in values {
            for decimals in 0...6 {
                #expect(value.fixed(decimals) == String(format: "%.\(decimals)f", value))
                #expect(value.fixed(decimals, sign: true) == String(format: "%+.\(decimals)f", value))
            }
        }
    }

    @Test func trimmingIsCharacterSets() {
        for text in ["", "   ", " a b ", "\ta\t", "\n a \n", "\u{00A0}x\u{2003}", "x\r\n", "\u{1F600} "] {
            #expect(text.trimmingSpaces() == text.trimmingCharacters(in: .whitespaces), "\(text.debugDescription)")
            #expect(text.trimmingWhitespace() == text.trimmingCharacters(in: .whitespacesAndNewlines), "\(text.debugDescription)")
        }
    }
}

/// Any JSON value at all, for the decoder as a syntax reference (JSONValue
/// also refuses whole numbers beyond 2^53, a rule of the product's).
private struct AnyJSON: Decodable {
    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { return }
        if (try? container.decode(Bool.self)) != nil || (try? container.decode(Double.self)) != nil
            || (try? container.decode(String.self)) != nil || (try? container.decode([AnyJSON].self)) != nil { return }
        _ = try container.decode([String: AnyJSON].self)
    }
}
