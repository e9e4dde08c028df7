"""The byte layout: file header and framed records, as pure functions over bytes."""

from __future__ import annotations

import random
import struct
import tracemalloc
import unittest
import zlib
from collections.abc import Callable

import harness.support  # noqa: F401  (puts src/ on sys.path)

from nobroker import codec
from nobroker.file.log import framing, records
from nobroker.file.log.framing import (
    BAD,
    END,
    FILE_HEADER,
    INCOMPLETE,
    MAX_RECORD,
    MORE,
    RECORD,
    RECORD_HEADER,
    TYPE_MASK,
    FrameError,
    decode_file_header,
    decode_record,
    encode_file_header,
    encode_record,
)
from nobroker.validation import MAX_ID_LENGTH


def frame(length: int, type_byte: int, crc: int, payload: bytes = b"") -> bytes:
    return struct.pack("<IBI", length, type_byte, crc) + payload


class RecordRoundTripTest(unittest.TestCase):
    def test_encode_then_decode_gives_back_type_payload_and_next_position(self) -> None:
        for rtype in (1, 2, 11, TYPE_MASK):
            for payload in (b"x", b'{"b":1,"id":"a"}', bytes(range(256)) * 40):
                with self.subTest(rtype=rtype, size=len(payload)):
                    data = b"prefix" + encode_record(rtype, payload)
                    outcome, type_byte, got, nxt = decode_record(data, 6)
                    self.assertEqual((outcome, type_byte, got, nxt),
                                     (RECORD, rtype, payload, len(data)))

    def test_encode_batch_is_encode_record_per_record_with_more_on_all_but_the_last(
            self) -> None:
        records = [(1, b'{"b":1,"id":"a"}'), (3, b'{"b":1}'), (12, b"x" * 300)]
        data, sizes = framing.encode_batch(records)
        expected = [encode_record(t, p, more=i < len(records) - 1)
                    for i, (t, p) in enumerate(records)]
        self.assertEqual(data, b"".join(expected))
        self.assertEqual(sizes, [len(frame) for frame in expected])
        self.assertEqual(framing.encode_batch([(2, b"{}")]), (encode_record(2, b"{}"), [11]))

    def test_the_more_flag_survives_the_round_trip_and_leaves_the_type_intact(self) -> None:
        data = encode_record(3, b"{}", more=True)
        outcome, type_byte, _, _ = decode_record(data, 0)
        self.assertEqual(outcome, RECORD)
        self.assertTrue(type_byte & MORE)
        self.assertEqual(type_byte & TYPE_MASK, 3)
        self.assertFalse(decode_record(encode_record(3, b"{}"), 0)[1] & MORE)

    def test_records_decode_one_after_another_from_memoryviews_too(self) -> None:
        records = [encode_record(i % 10 + 1, b"p%d" % i, more=i % 3 != 2) for i in range(30)]
        data = memoryview(b"".join(records) + bytes(64))
        pos, seen = 0, []
        while True:
            outcome, _, payload, nxt = decode_record(data, pos)
            if outcome != RECORD:
                break
            seen.append(payload)
            pos = nxt
        self.assertEqual(outcome, END)
        self.assertEqual(seen, [b"p%d" % i for i in range(30)])

    def test_layout_is_length_type_crc_then_payload_little_endian(self) -> None:
        data = encode_record(2, b"abc")
        length, type_byte, crc = RECORD_HEADER.unpack_from(data)
        self.assertEqual((length, type_byte, data[9:]), (3, 2, b"abc"))
        self.assertEqual(crc, zlib.crc32(b"abc", zlib.crc32(data[:5])))
        self.assertEqual(RECORD_HEADER.size, 9)


class CrcCoverageTest(unittest.TestCase):
    def test_nine_zero_bytes_are_the_end_never_a_record(self) -> None:
        self.assertEqual(decode_record(bytes(9), 0)[0], END)
        self.assertEqual(decode_record(b"R" + bytes(4096), 1)[0], END)

    def test_why_the_crc_must_cover_length_and_type(self) -> None:
        # The trap: the CRC of an empty payload is 0. With a payload-only CRC,
        # nine zero bytes would be a valid (length 0, type 0) record, and every
        # zero-filled region a power cut leaves behind would read as records.
        self.assertEqual(zlib.crc32(b""), 0)
        payload_only_crc = zlib.crc32(b"")
        self.assertEqual(bytes(9), frame(0, 0, payload_only_crc))
        # Covering the header too, the same nine bytes would need this CRC instead:
        self.assertEqual(zlib.crc32(bytes(5)), 3324180253)
        self.assertNotEqual(zlib.crc32(bytes(5)), 0)
        # And a record framed with a payload-only CRC is refused.
        self.assertEqual(decode_record(frame(3, 1, zlib.crc32(b"abc"), b"abc"), 0)[0], BAD)

    def test_a_changed_length_or_type_byte_fails_the_crc(self) -> None:
        good = encode_record(4, b"abcdef")
        length_changed = bytearray(good)
        length_changed[0] = 5  # still inside the buffer: only the CRC can tell
        type_changed = bytearray(good)
        type_changed[4] = 5
        more_changed = bytearray(good)
        more_changed[4] |= MORE
        for name, data in (("length", length_changed), ("type", type_changed),
                           ("more flag", more_changed)):
            with self.subTest(name):
                outcome, _, reason, _ = decode_record(bytes(data), 0)
                self.assertEqual(outcome, BAD)
                self.assertIn(b"crc", reason)

    def test_every_single_bit_flip_in_a_record_is_detected(self) -> None:
        good = encode_record(5, b'{"b":1,"id":"x"}')
        for bit in range(len(good) * 8):
            data = bytearray(good)
            data[bit // 8] ^= 1 << (bit % 8)
            outcome = decode_record(bytes(data), 0)[0]
            # a flip in the length may also make the record run past the buffer
            self.assertIn(outcome, (BAD, INCOMPLETE), f"bit {bit}")
            self.assertNotEqual(outcome, RECORD, f"bit {bit}")


class InvalidFramesTest(unittest.TestCase):
    def test_length_zero_is_invalid_even_with_a_matching_crc(self) -> None:
        crc = zlib.crc32(struct.pack("<IB", 0, 1))
        outcome, _, reason, _ = decode_record(frame(0, 1, crc), 0)
        self.assertEqual(outcome, BAD)
        self.assertIn(b"length", reason)

    def test_type_zero_is_invalid_even_with_a_matching_crc(self) -> None:
        for type_byte in (0, MORE):
            with self.subTest(type_byte=type_byte):
                head = struct.pack("<IB", 1, type_byte)
                data = frame(1, type_byte, zlib.crc32(b"x", zlib.crc32(head)), b"x")
                outcome, _, reason, _ = decode_record(data, 0)
                self.assertEqual(outcome, BAD)
                self.assertIn(b"type 0", reason)

    def test_encoding_type_zero_would_not_decode(self) -> None:
        self.assertEqual(decode_record(encode_record(0, b"x"), 0)[0], BAD)

    def test_length_beyond_max_record_is_rejected_without_allocating_it(self) -> None:
        for length in (MAX_RECORD + 1, 0xFFFFFFFF):
            with self.subTest(length=length):
                data = frame(length, 1, 12345) + b"x" * 100
                tracemalloc.start()
                try:
                    outcome, _, reason, nxt = decode_record(data, 0)
                    _, peak = tracemalloc.get_traced_memory()
                finally:
                    tracemalloc.stop()
                self.assertEqual((outcome, nxt), (BAD, 0))
                self.assertIn(b"out of range", reason)
                self.assertLess(peak, 64 * 1024, "decoder allocated for a bogus length")

    def test_max_record_itself_is_a_valid_length(self) -> None:
        payload = b"a" * MAX_RECORD
        self.assertEqual(decode_record(encode_record(1, payload), 0)[0], RECORD)

    def test_a_length_running_past_the_buffer_is_incomplete_not_allocated(self) -> None:
        data = frame(MAX_RECORD, 1, 0) + b"abc"
        tracemalloc.start()
        try:
            outcome = decode_record(data, 0)[0]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertEqual(outcome, INCOMPLETE)
        self.assertLess(peak, 64 * 1024)


class IncompleteAndEndTest(unittest.TestCase):
    def test_a_record_cut_anywhere_is_incomplete(self) -> None:
        good = encode_record(2, b"payload!")
        for cut in range(1, len(good)):
            with self.subTest(cut=cut):
                data = good[:cut]
                outcome = decode_record(data, 0)[0]
                if not any(data):  # impossible here: the length byte is non-zero
                    self.assertEqual(outcome, END)
                else:
                    self.assertEqual(outcome, INCOMPLETE)

    def test_the_end_of_the_buffer_and_short_zero_runs_are_end(self) -> None:
        self.assertEqual(decode_record(b"", 0)[0], END)
        self.assertEqual(decode_record(b"abc", 3)[0], END)
        self.assertEqual(decode_record(bytes(5), 0)[0], END)

    def test_a_short_non_zero_remainder_is_incomplete(self) -> None:
        self.assertEqual(decode_record(b"\x00\x00\x01", 0)[0], INCOMPLETE)

    def test_a_zero_header_followed_by_garbage_is_still_end_at_that_position(self) -> None:
        # Deciding whether the rest is garbage is the log file's job, not the decoder's.
        outcome, _, _, nxt = decode_record(bytes(9) + b"junk", 0)
        self.assertEqual((outcome, nxt), (END, 0))


class FileHeaderTest(unittest.TestCase):
    def test_round_trip_of_the_generation(self) -> None:
        for generation in (0, 1, 999_999, 2**32 - 1):
            with self.subTest(generation=generation):
                header = encode_file_header(generation)
                self.assertEqual(len(header), FILE_HEADER.size)
                self.assertEqual(FILE_HEADER.size, 16)
                self.assertEqual(decode_file_header(header + b"records"), generation)

    def test_header_layout_is_magic_version_generation_reserved(self) -> None:
        magic, version, generation, reserved = FILE_HEADER.unpack(encode_file_header(7))
        self.assertEqual((magic, version, generation, reserved),
                         (b"NOBROKER", framing.FORMAT_VERSION, 7, 0))

    def test_bad_magic_is_refused(self) -> None:
        header = bytearray(encode_file_header(0))
        header[0] ^= 0x20
        with self.assertRaisesRegex(FrameError, "magic"):
            decode_file_header(bytes(header))

    def test_a_newer_version_is_refused_and_named_as_newer(self) -> None:
        header = FILE_HEADER.pack(framing.MAGIC, framing.FORMAT_VERSION + 1, 0, 0)
        with self.assertRaisesRegex(FrameError, "newer"):
            decode_file_header(header)
        with self.assertRaisesRegex(FrameError, "version"):
            decode_file_header(FILE_HEADER.pack(framing.MAGIC, 0, 0, 0))

    def test_a_non_zero_reserved_field_is_refused(self) -> None:
        with self.assertRaisesRegex(FrameError, "reserved"):
            decode_file_header(FILE_HEADER.pack(framing.MAGIC, framing.FORMAT_VERSION, 0, 1))

    def test_a_short_header_is_refused_not_a_struct_error(self) -> None:
        full = encode_file_header(0)
        for cut in range(FILE_HEADER.size):
            with self.subTest(cut=cut):
                with self.assertRaises(FrameError):
                    decode_file_header(full[:cut])

    def test_frame_error_is_a_value_error(self) -> None:
        self.assertTrue(issubclass(FrameError, ValueError))


class EnqueueTextTest(unittest.TestCase):
    """The ENQUEUE fast path must write what the generic encoder would."""

    def test_enqueue_text_equals_the_generic_encoding_of_the_same_fields(self) -> None:
        rng = random.Random(4)
        ids = ["0123456789abcdef", "order-7", 'quote " and \\ backslash', "caf\u00e9 \u2603",
               "x" * MAX_ID_LENGTH]
        times = [0.0, 1.5, 1e16, 1732900000.123456, 2.0 ** -30, 123456789012.0]
        for _ in range(400):
            job_id, keyed = rng.choice(ids), rng.random() < 0.5
            fields = {"b": rng.randrange(1, 2**40), "id": job_id,
                      "pr": rng.choice([0, -3, 2**62, -(2**63)]), "at": rng.choice(times),
                      "t": rng.choice(times), "ma": rng.choice([1, 5, 2**62])}
            if keyed:
                fields["k"] = True
            payload = records.encode_payload(rng.choice([None, 1, "text", {"a": [1.5, "\u00e9"]}]))
            expected = records.dumps(fields)[:-1] + ',"p":' + payload + "}"
            got = records.enqueue_text(fields["b"], job_id, fields["pr"], fields["at"],
                                       fields["t"], fields["ma"], keyed, payload)
            self.assertEqual(got, expected)
            self.assertEqual(records.loads(got), {**fields, "p": records.loads(payload)})


    def test_ack_and_lease_texts_equal_the_generic_encoding_of_the_same_fields(self) -> None:
        # And Batch.add_ack/add_lease add what Batch.add would, "d" on a first record.
        from nobroker.file.state.batch import Batch
        rng = random.Random(5)
        ids = ["0123456789abcdef", 'quote " and \\ backslash', "caf\u00e9 \u2603"]
        times = [0.0, 1.5, 1e16, 1732900000.123456, 2.0 ** -30, 123456789012.0]
        for _ in range(400):
            job_id, token = rng.choice(ids), rng.choice([0, 1, 7, 2**62])
            t, until = rng.choice(times), rng.choice(times)
            number, durable = rng.randrange(1, 2**40), rng.choice([0, 0, 1, 2**40])
            known = {"d": durable} if durable else {}
            ack = {"b": number, **known, "id": job_id, "tok": token, "t": t}
            lease = {"b": number, **known, "id": job_id, "tok": token, "until": until, "t": t}
            self.assertEqual(records.ack_text(number, job_id, token, t, durable),
                             records.dumps(ack))
            self.assertEqual(records.lease_text(number, job_id, token, until, t, durable),
                             records.dumps(lease))
            fast, generic = Batch(number, durable), Batch(number, durable)
            fast.add_ack(job_id, token, t)
            self.assertEqual(fast.add_lease(job_id, token + 1, until, t),
                             generic.add(records.RecordType.ACK,
                                         {"id": job_id, "tok": token, "t": t})
                             and generic.add(records.RecordType.LEASE,
                                             {"id": job_id, "tok": token + 1, "until": until,
                                              "t": t}))
            self.assertEqual(fast._items, generic._items)


class LoadsTest(unittest.TestCase):
    """`loads` calls the json module's C scanner itself: it must accept, refuse and
    explain exactly as the strict decoder's own decode() does."""

    def test_loads_agrees_with_the_decoders_decode(self) -> None:
        cases = [b'{"b":1}', b'{"b":1} ', b'{"b":1}\n\t', b'{"b":1}x', b'{"b":1}{"b":2}',
                 b' \r\n{"b":1}', b"", b"   ", b"7", b' "s" ', b"[1, 2.5]", b"null x",
                 b'{"b":NaN}', b'{"b":Infinity}', b'{"b":1e400}', b'{"b":-1e400}',
                 b'{"b":1,"p":[1.5,"\\u00e9",null,true]}', b'{"b":', b'{', b'{"b":1,}',
                 b'{"b":"\xff"}', b'{"b":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                 b'{"b":1}\x0b', b'{"b":"a\\"}']

        def outcome(parse: Callable[[bytes], object], data: bytes) -> object:
            try:
                return parse(data)
            except RecursionError:
                return "RecursionError"
            except ValueError as exc:
                return (type(exc).__name__, str(exc))

        def reference(data: bytes) -> object:
            return codec._decoder.decode(data.decode("utf-8"))

        for data in cases:
            expected = outcome(reference, data)
            if expected == "RecursionError":  # loads promises a ValueError instead
                expected = ("ValueError", "JSON nested too deeply")
            self.assertEqual(outcome(records.loads, data), expected, data[:60])
            # loads_object (replay's, the scanner without loads' wrapping): the object
            # loads gives, or None wherever loads refuses or gives anything else.
            self.assertEqual(codec.loads_object(data),
                             expected if isinstance(expected, dict) else None, data[:60])


if __name__ == "__main__":
    unittest.main()


class RecordFieldsTest(unittest.TestCase):
    """The record keys are named once (log/records.py); docs/FORMAT.md specifies them."""

    @staticmethod
    def documented_keys(text: str) -> set[str]:
        """The keys FORMAT.md's record table names (backticked words in its rows)."""
        import re
        rows = [line for line in text.splitlines() if re.match(r"\| \d+ \| [A-Z]+ \|", line)]
        return {key for row in rows for key in re.findall(r"`([a-z]+)`", row)}

    def test_the_named_record_keys_are_the_ones_format_md_documents(self) -> None:
        from harness.support import REPO
        documented = self.documented_keys((REPO / "docs" / "FORMAT.md").read_text("utf-8"))
        documented |= {records.BATCH, records.DURABLE}  # every record's, above the table
        self.assertEqual(len(set(records.FIELDS)), len(records.FIELDS), "a key named twice")
        self.assertEqual(sorted(records.FIELDS), sorted(documented))

    def test_an_undocumented_key_is_caught(self) -> None:
        table = "| 1 | ENQUEUE | `id` str, `pr` int | new job |\n| 2 | LEASE | `tok` | x |"
        self.assertEqual(self.documented_keys(table), {"id", "pr", "tok"})
        self.assertNotIn("zz", self.documented_keys(table))
