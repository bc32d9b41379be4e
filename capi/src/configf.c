/* SCR_Configf: the printf form of SCR_Config. Formats into a buffer sized by a first
 * vsnprintf, then passes the text to SCR_Config (which reports any problem). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "scr.h"

/* Reports a format that could not be expanded (defined in Rust, src/ffi.rs). */
void scr_rs_configf_failed(const char* format);

const char* SCR_Configf(const char* format, ...)
{
    if (format == NULL) {
        return SCR_Config(NULL);
    }
    va_list args;
    va_start(args, format);
    int n = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (n < 0) {
        scr_rs_configf_failed(format);
        return NULL;
    }
    char* text = malloc((size_t)n + 1);
    if (text == NULL) {
        scr_rs_configf_failed(format);
        return NULL;
    }
    va_start(args, format);
    vsnprintf(text, (size_t)n + 1, format, args);
    va_end(args);
    const char* value = SCR_Config(text);
    free(text);
    return value;
}
