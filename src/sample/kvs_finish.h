/*
 * kvs_finish: why a choice stopped generating.
 *
 * The engine sets it, the wire carries it as a number, the API layer
 * names it in responses ("stop", "length"), so it lives below all three.
 * The numbers are part of the engine wire: new reasons go at the end.
 */

#ifndef KVS_FINISH_H
#define KVS_FINISH_H

typedef enum {
    KVS_FINISH_NONE = 0,              /* still generating */
    KVS_FINISH_STOP,                  /* end-of-text token, stop token or
                                         stop string */
    KVS_FINISH_LENGTH,                /* max_tokens reached */
    KVS_FINISH_CANCELLED,
    KVS_FINISH_ERROR,
    KVS_FINISH_CONTENT_FILTER         /* a guard stopped it (set by the
                                         nginx side, never on the wire:
                                         the engine was cancelled) */
} kvs_finish_t;

/* "stop", "length", "cancelled", "error", "content_filter" (OpenAI's
 * name; Anthropic's stop_reason for it is "refusal"); "none" for
 * anything else. */
const char *kvs_finish_name(kvs_finish_t f);

/* 1 for the reasons a response names as a choice's end (stop, length,
 * content_filter); 0 while generating, and for cancelled and error,
 * which end the request instead. */
int kvs_finish_answered(kvs_finish_t f);

#endif /* KVS_FINISH_H */
