/*
 * Memory-safety check for protocol/_recscan.c: its scanning core, built with
 * AddressSanitizer and UndefinedBehaviorSanitizer, run over damaged copies of real records
 * sections. Each copy lives in a heap block of exactly its own size, so a read one byte past
 * the data stops the run; every value byte a scan hands out is read, as the Python module's
 * PyBytes_FromStringAndSize would read it.
 *
 * Usage: recscan_fuzz ITERATIONS SEED_FILE...   (tests/unit/test_recscan_memory.py runs it)
 * Prints what it saw: copies scanned, records read, records cut short, irregular records.
 */
#define RECSCAN_NO_PYTHON
#include "../../protocol/_recscan.c"

#include <stdio.h>
#include <stdlib.h>

static uint64_t state = 0x9E3779B97F4A7C15u;

static uint64_t
next_random(void)
{ /* xorshift64: the same run every time */
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

typedef struct {
    unsigned long long read, cut, irregular, value_bytes;
} tally;

static const wanted_key keys[] = {{"trace-id", 8}, {"h", 1}, {"", 0}};

static void
scan(const uint8_t *b, Py_ssize_t stop, int read_headers, tally *seen)
{
    Py_ssize_t position = 0, needed;
    scanned_record record;
    for (;;) {
        int answer = scan_record(b, position, stop, read_headers, keys, 3, &record, &needed);
        if (answer == RECORD_CUT) {
            seen->cut++;
            return;
        }
        if (answer == RECORD_IRREGULAR) {
            seen->irregular++;
            return;
        }
        seen->read++;
        if (record.end <= position || record.end > stop) {
            fprintf(stderr, "record at %td ends at %td, outside (%td, %td]\n", position,
                    record.end, position, stop);
            abort();
        }
        for (int64_t i = 0; i < record.value_size; i++) {
            seen->value_bytes += b[record.value_start + i] != 0;
        }
        position = record.end;
    }
}

static uint8_t *
read_file(const char *path, size_t *size)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL || fseek(file, 0, SEEK_END) != 0) {
        perror(path);
        exit(2);
    }
    long length = ftell(file);
    rewind(file);
    uint8_t *data = malloc((size_t)length + 1);
    if (data == NULL || fread(data, 1, (size_t)length, file) != (size_t)length) {
        perror(path);
        exit(2);
    }
    fclose(file);
    *size = (size_t)length;
    return data;
}

int
main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ITERATIONS SEED_FILE...\n", argv[0]);
        return 2;
    }
    long iterations = atol(argv[1]);
    int seed_count = argc - 2;
    uint8_t **seeds = calloc((size_t)seed_count, sizeof *seeds);
    size_t *sizes = calloc((size_t)seed_count, sizeof *sizes);
    for (int i = 0; i < seed_count; i++) {
        seeds[i] = read_file(argv[i + 2], &sizes[i]);
    }
    static const uint8_t awkward[] = {0x00, 0x01, 0x02, 0x0F, 0x10, 0x7F, 0x80, 0x81, 0xFF};
    tally seen = {0, 0, 0, 0};
    for (long n = 0; n < iterations; n++) {
        int which = (int)(next_random() % (uint64_t)seed_count);
        size_t size = sizes[which];
        if (next_random() % 4 == 0) { /* cut short anywhere */
            size = (size_t)(next_random() % (size + 1));
        }
        uint8_t *copy = malloc(size ? size : 1);
        memcpy(copy, seeds[which], size);
        int damage = n == 0 ? 0 : (int)(next_random() % 9);
        for (int d = 0; d < damage && size > 0; d++) {
            uint64_t r = next_random();
            copy[r % size] = (r >> 32) % 2 ? awkward[(r >> 40) % sizeof awkward] : (uint8_t)(r >> 48);
        }
        scan(copy, (Py_ssize_t)size, 1, &seen);
        scan(copy, (Py_ssize_t)size, 0, &seen);
        free(copy);
    }
    for (int i = 0; i < seed_count; i++) {
        free(seeds[i]);
    }
    free(seeds);
    free(sizes);
    printf("copies %ld read %llu cut %llu irregular %llu value_bytes %llu\n", iterations,
           seen.read, seen.cut, seen.irregular, seen.value_bytes);
    return 0;
}
